"""``softmax(logits + mask) v`` on given logits as a custom op
(``torch.ops.vitattn.softmax_apply``): Less-Attention's layers, whose
logits exist (a VA layer keeps them, an LA layer transforms them).

Eagerly the softmax writes a probability map as large as the logits (in
fp32 under autocast) and its backward reads it again; the op never stores
it (flash attention's passes, :mod:`.triton_softmax_apply`). As
:mod:`.linear_attention`: the eager composition is the reference and the
CPU path, the shape function serves ``torch.compile`` and the cost model.
"""
from typing import List, Optional

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import register_flop_formula

from .backend import interpreting, kernels_run_on
from .common import block_d, eager_grads, save_with_aux, saved_inputs


def softmax_apply_eager(logits: torch.Tensor,
                        v: torch.Tensor,
                        mask: Optional[torch.Tensor],
                        dropout_p: float = 0.) -> torch.Tensor:
    """The eager composition.

    Args:
        logits (Tensor): ``(B, heads, N_q, N_k)``.
        v (Tensor): ``(B, heads, N_k, d)``.
        mask (Tensor, optional): ``(nW, N_q, N_k)`` additive mask of the
            windows, the batch holding each image's ``nW`` windows in turn.
        dropout_p (float): Dropout of the probabilities (the eager path
            only). Default: 0.

    Returns:
        Tensor: ``(B, heads, N_q, d)``, the dtype of ``v``.
    """
    # Imported here: the models import this package, not the other way.
    from ..models.attentions.functional import masked_softmax
    return apply_probabilities(masked_softmax(logits, mask), v, dropout_p)


def apply_probabilities(probs: torch.Tensor, v: torch.Tensor,
                        dropout_p: float = 0.) -> torch.Tensor:
    """``dropout(probs) v``, in the dtype of ``v``: the eager
    composition's product, for a caller that keeps the map."""
    if dropout_p:
        probs = F.dropout(probs, dropout_p)
    return probs.to(v.dtype) @ v


def _kernels():
    from . import triton_softmax_apply
    return triton_softmax_apply


def _launch_forward(logits, v, mask):
    tk = _kernels()
    B, h, Nq, Nk = logits.shape
    D = v.shape[-1]
    out = v.new_empty(B, h, Nq, D)
    lse = torch.empty(B * h, Nq, device=v.device, dtype=torch.float32)
    tk.forward_kernel[(-(-Nq // tk.BLOCK), B * h)](
        logits, logits if mask is None else mask, v, *v.stride()[:3], out,
        lse, h, Nq, Nk, 1 if mask is None else mask.shape[0], D,
        HAS_MASK=mask is not None, UPCAST=_upcast(v), BLOCK_M=tk.BLOCK,
        BLOCK_N=tk.BLOCK, BLOCK_D=block_d(D), num_warps=tk.NUM_WARPS)
    return out, lse


def _upcast(v: torch.Tensor) -> bool:
    """Products in fp32 where Triton's interpreter gets bf16 ones wrong."""
    return v.dtype == torch.bfloat16 and interpreting()


def _inputs(logits, v, mask):
    v = v if v.stride(-1) == 1 else v.contiguous()
    return (logits.contiguous(), v,
            None if mask is None else mask.contiguous())


@torch.library.custom_op('vitattn::softmax_apply', mutates_args=())
def softmax_apply_with_lse(logits: torch.Tensor, v: torch.Tensor,
                           mask: Optional[torch.Tensor]
                           ) -> List[torch.Tensor]:
    """:func:`softmax_apply_eager` as one op, and the rows' fp32
    log-sum-exp ``(B * heads, N_q)`` (not differentiable), which its
    backward reads instead of a sweep over the logits of its own."""
    if not kernels_run_on(logits.device):
        # The CPU path: the composition, and its rows' log-sum-exp.
        from ..models.attentions.functional import add_logit_bias
        masked = add_logit_bias(logits.float(), None, mask)
        return [softmax_apply_eager(logits, v, mask),
                masked.logsumexp(-1).flatten(0, 1)]
    return list(_launch_forward(*_inputs(logits, v, mask)))


@softmax_apply_with_lse.register_fake
def _(logits, v, mask):
    B, h, Nq = logits.shape[:3]
    return [v.new_empty(B, h, Nq, v.shape[-1]),
            logits.new_empty(B * h, Nq, dtype=torch.float32)]


def softmax_apply_op(logits: torch.Tensor, v: torch.Tensor,
                     mask: Optional[torch.Tensor]) -> torch.Tensor:
    """:func:`softmax_apply_eager` as one op (``vitattn::softmax_apply``,
    whose log-sum-exp stays with autograd)."""
    return softmax_apply_with_lse(logits, v, mask)[0]


@torch.library.custom_op('vitattn::softmax_apply_backward', mutates_args=())
def softmax_apply_backward_op(grad: torch.Tensor, logits: torch.Tensor,
                              v: torch.Tensor, mask: Optional[torch.Tensor],
                              out: torch.Tensor, lse: torch.Tensor
                              ) -> List[torch.Tensor]:
    """Gradients of the logits and of ``v`` (the mask is a constant),
    given the forward's output and log-sum-exp."""
    if not kernels_run_on(logits.device):
        return eager_grads(softmax_apply_eager, grad, (logits, v), (mask, ))
    tk = _kernels()
    logits, v, mask = _inputs(logits, v, mask)
    grad = grad.contiguous()
    B, h, Nq, Nk = logits.shape
    D = v.shape[-1]
    dlogits = torch.empty_like(logits)
    dv = torch.empty_like(v)
    flags = dict(HAS_MASK=mask is not None, UPCAST=_upcast(v),
                 BLOCK_M=tk.BLOCK, BLOCK_N=tk.BLOCK, BLOCK_D=block_d(D),
                 num_warps=tk.NUM_WARPS)
    sizes = (h, Nq, Nk, 1 if mask is None else mask.shape[0], D)
    masks = logits if mask is None else mask
    tk.logits_backward_kernel[(-(-Nq // tk.BLOCK), B * h)](
        logits, masks, v, *v.stride()[:3], grad, out.contiguous(), lse,
        dlogits, *sizes, **flags)
    tk.values_backward_kernel[(-(-Nk // tk.BLOCK), B * h)](
        logits, masks, grad, lse, dv, *dv.stride()[:3], *sizes, **flags)
    return [dlogits, dv]


@softmax_apply_backward_op.register_fake
def _(grad, logits, v, mask, out, lse):
    return [torch.empty_like(logits), torch.empty_like(v)]


def _setup(ctx, inputs, output):
    # The output too (delta = dout . out), saved with the inputs.
    save_with_aux(ctx, (*inputs, output[0]), output)


def _backward(ctx, grads):
    # grads: the output's and the log-sum-exp's (None: not differentiable).
    if grads[0] is None:
        return None, None, None
    dlogits, dv = softmax_apply_backward_op(grads[0], *saved_inputs(ctx))
    return dlogits, dv, None


softmax_apply_with_lse.register_autograd(_backward, setup_context=_setup)


@register_flop_formula(torch.ops.vitattn.softmax_apply)
def _flops(logits, v, *args, out_shape=None, **kwargs) -> int:
    """The product with ``v`` (as the eager matmul counts)."""
    B, h, Nq, Nk = logits
    return 2 * B * h * Nq * Nk * v[-1]


@register_flop_formula(torch.ops.vitattn.softmax_apply_backward)
def _backward_flops(grad, logits, v, *args, out_shape=None, **kwargs) -> int:
    return 2 * _flops(logits, v)
