"""``softmax(logits + mask) v`` on given logits as a custom op
(``torch.ops.vitattn.softmax_apply``): Less-Attention's layers, whose
logits exist (a VA layer keeps them, an LA layer transforms them).

Eagerly the softmax writes a probability map as large as the logits (in
fp32 under autocast) and its backward reads it again; the op never stores
it (flash attention's passes, :mod:`.triton_softmax_apply`). As
:mod:`.linear_attention`: the eager composition is the reference and the
CPU path, the shape function serves ``torch.compile`` and the cost model.

An LA layer's map also gives the Diagonality-Preserving loss of its
softmax, pooled onto the key grid: ``vitattn::softmax_apply_with_dp_loss``
returns both, and its backward writes the logits' one gradient in the
softmax's pass (the loss's own backward was a pass over the logits and an
addition of the two gradients, each three passes of the map).
"""
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import register_flop_formula

from .backend import interpreting, kernels_run_on
from .common import block_d, eager_grads, save_with_aux, saved_inputs
from .diagonality_loss import (pooled_diagonality_loss_eager,
                               pooled_loss_kernels)


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


def _launch_forward(logits, v, mask, dp=None):
    """The forward kernel: output and log-sum-exp, and given ``dp`` (the
    pooled map's gradient and the grids) the rows' ``E`` too."""
    tk = _kernels()
    B, h, Nq, Nk = logits.shape
    D = v.shape[-1]
    out = v.new_empty(B, h, Nq, D)
    lse = torch.empty(B * h, Nq, device=v.device, dtype=torch.float32)
    # Without the DP loss the kernel reads no map's gradient and writes no
    # E: placeholders.
    dmap, grids = (lse, [1] * 4) if dp is None else (dp[0], dp[1] + dp[2])
    e = lse if dp is None else torch.empty_like(lse)
    tk.forward_kernel[(-(-Nq // tk.BLOCK), B * h)](
        logits, logits if mask is None else mask, v, *v.stride()[:3], out,
        lse, dmap, e, h, Nq, Nk, 1 if mask is None else mask.shape[0], D,
        *grids, HAS_MASK=mask is not None, DP=dp is not None,
        UPCAST=_upcast(v), BLOCK_M=tk.BLOCK,
        BLOCK_N=tk.BLOCK if dp is None else tk.DP_BLOCK_N,
        BLOCK_D=block_d(D), num_warps=tk.NUM_WARPS)
    return out, lse, e


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
    return list(_launch_forward(*_inputs(logits, v, mask))[:2])


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
                              out: torch.Tensor, lse: torch.Tensor,
                              other_grad: Optional[torch.Tensor] = None
                              ) -> List[torch.Tensor]:
    """Gradients of the logits and of ``v`` (the mask is a constant),
    given the forward's output and log-sum-exp; the gradient of the
    logits' other use (:func:`softmax_apply_passing_on`), given, added
    into theirs."""
    if not kernels_run_on(logits.device):
        return _with_other(eager_grads(softmax_apply_eager, grad, (logits, v),
                                       (mask, )), other_grad)
    return _launch_backward(grad, *_inputs(logits, v, mask), out, lse,
                            other=other_grad)


def _with_other(grads: List[torch.Tensor],
                other_grad: Optional[torch.Tensor]) -> List[torch.Tensor]:
    """The CPU path's logits gradient plus that of their other use."""
    if other_grad is not None:
        grads[0] = grads[0] + other_grad
    return grads


def _launch_backward(grad, logits, v, mask, out, lse, dp=None, other=None):
    """The backward kernels: the logits' and the values' gradients; given
    ``dp`` (the pooled map's gradient, the forward's ``E``, the loss's
    gradient and the grids) the DP loss's share of the logits' too, and
    given ``other`` that gradient of the logits' other use."""
    tk = _kernels()
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
    extra, grids = (lse, lse, lse), [1] * 4
    if dp is not None:
        extra, grids = dp[:3], dp[3] + dp[4]
    tk.logits_backward_kernel[(-(-Nq // tk.BLOCK), B * h)](
        logits, masks, v, *v.stride()[:3], grad, out.contiguous(), lse,
        dlogits, *extra, lse if other is None else other.contiguous(),
        *sizes, *grids, DP=dp is not None, OTHER=other is not None,
        **dict(flags, BLOCK_N=tk.BLOCK if dp is None else tk.DP_BLOCK_N))
    tk.values_backward_kernel[(-(-Nk // tk.BLOCK), B * h)](
        logits, masks, grad, lse, dv, *dv.stride()[:3], *sizes, **flags)
    return [dlogits, dv]


@softmax_apply_backward_op.register_fake
def _(grad, logits, v, mask, out, lse, other_grad=None):
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


# ------------------------------------- with the DP loss of the same softmax


def softmax_apply_dp_eager(logits: torch.Tensor, v: torch.Tensor,
                           query_hw: Sequence[int], key_hw: Sequence[int]
                           ) -> Tuple[torch.Tensor, torch.Tensor]:
    """``softmax(logits) v`` and the bounded Diagonality-Preserving loss of
    that softmax with its queries pooled onto the key grid
    (:func:`~vitattn_mm.ops.pooled_diagonality_loss_eager`), eagerly."""
    return (softmax_apply_eager(logits, v, None),
            pooled_diagonality_loss_eager(logits, query_hw, key_hw))


@torch.library.custom_op('vitattn::softmax_apply_with_dp_loss',
                         mutates_args=())
def softmax_apply_with_dp_loss(logits: torch.Tensor, v: torch.Tensor,
                               query_hw: List[int], key_hw: List[int]
                               ) -> List[torch.Tensor]:
    """:func:`softmax_apply_dp_eager` as one op (grids that
    :func:`~vitattn_mm.ops.diagonality_loss.pooled_op_takes`): the output,
    the loss (fp32), and what the backward reads (not differentiable):
    the rows' log-sum-exp and ``E`` for a unit loss gradient, ``(B *
    heads, N_q)`` fp32 each (zero on the CPU, whose backward
    differentiates the composition)."""
    if not kernels_run_on(logits.device):
        rows = logits.new_zeros(logits.shape[0] * logits.shape[1],
                                logits.shape[2], dtype=torch.float32)
        return [*softmax_apply_dp_eager(logits, v, query_hw, key_hw), rows,
                rows.clone()]
    logits, v, _ = _inputs(logits, v, None)
    loss, dmap = pooled_loss_kernels(
        logits, query_hw, key_hw, torch.ones(1, device=logits.device),
        with_loss=True)
    out, lse, e = _launch_forward(logits, v, None, (dmap, query_hw, key_hw))
    return [out, loss, lse, e]


@softmax_apply_with_dp_loss.register_fake
def _(logits, v, query_hw, key_hw):
    B, h, Nq = logits.shape[:3]
    rows = logits.new_empty(B * h, Nq, dtype=torch.float32)
    return [v.new_empty(B, h, Nq, v.shape[-1]),
            logits.new_empty((), dtype=torch.float32), rows,
            torch.empty_like(rows)]


def softmax_apply_dp_op(logits: torch.Tensor, v: torch.Tensor,
                        query_hw: Sequence[int], key_hw: Sequence[int]
                        ) -> Tuple[torch.Tensor, torch.Tensor]:
    """:func:`softmax_apply_dp_eager` as one op
    (``vitattn::softmax_apply_with_dp_loss``): the output and the loss."""
    out, loss, *_ = softmax_apply_with_dp_loss(logits, v, list(query_hw),
                                               list(key_hw))
    return out, loss


@torch.library.custom_op('vitattn::softmax_apply_with_dp_loss_backward',
                         mutates_args=())
def softmax_apply_with_dp_loss_backward_op(
        grad: torch.Tensor, loss_grad: torch.Tensor, logits: torch.Tensor,
        v: torch.Tensor, query_hw: List[int], key_hw: List[int],
        out: torch.Tensor, lse: torch.Tensor, e: torch.Tensor,
        other_grad: Optional[torch.Tensor] = None) -> List[torch.Tensor]:
    """Gradients of the logits (the output's and the loss's in one, and
    that of their other use given it) and of ``v``, given the forward's
    output, log-sum-exp and ``E``."""
    if not kernels_run_on(logits.device):
        return _with_other(eager_grads(softmax_apply_dp_eager,
                                       (grad, loss_grad), (logits, v),
                                       (query_hw, key_hw)), other_grad)
    logits, v, _ = _inputs(logits, v, None)
    _, dmap = pooled_loss_kernels(logits, query_hw, key_hw, loss_grad)
    return _launch_backward(grad, logits, v, None, out, lse,
                            (dmap, e, loss_grad.reshape(1), query_hw,
                             key_hw), other_grad)


@softmax_apply_with_dp_loss_backward_op.register_fake
def _(grad, loss_grad, logits, v, query_hw, key_hw, out, lse, e,
      other_grad=None):
    return [torch.empty_like(logits), torch.empty_like(v)]


def _dp_setup(ctx, inputs, output):
    logits, v, query_hw, key_hw = inputs
    out, _, lse, e = output
    ctx.save_for_backward(logits, v, None, out, lse, e)
    ctx.dp_grids = (query_hw, key_hw)
    ctx.mark_non_differentiable(lse, e)
    ctx.set_materialize_grads(False)


def _dp_backward(ctx, grads):
    return (*_softmax_backward(ctx, *grads[:2], None), None, None)


def _softmax_backward(ctx, grad, loss_grad, other_grad):
    """The logits' and the values' gradients of the fused softmax, with
    the DP loss where its forward took it (``ctx.dp_grids``), from the
    upstream gradients of the output, the loss and the logits' other use
    (each may be None) and what the forward saved: ``(logits, v, mask,
    out, lse, E)``."""
    logits, v, mask, out, lse, e = ctx.saved_tensors
    if grad is None and loss_grad is None:
        return other_grad, None
    if grad is None:
        grad = torch.zeros_like(out)
    if loss_grad is None:  # the loss unused: the softmax's backward alone
        return softmax_apply_backward_op(grad, logits, v, mask, out, lse,
                                         other_grad)
    return softmax_apply_with_dp_loss_backward_op(
        grad, loss_grad, logits, v, *(list(hw) for hw in ctx.dp_grids),
        out, lse, e, other_grad)


softmax_apply_with_dp_loss.register_autograd(_dp_backward,
                                             setup_context=_dp_setup)


@register_flop_formula(torch.ops.vitattn.softmax_apply_with_dp_loss)
def _dp_flops(logits, v, *args, out_shape=None, **kwargs) -> int:
    """The product with ``v``: the loss's passes are memory-bound."""
    return _flops(logits, v)


@register_flop_formula(
    torch.ops.vitattn.softmax_apply_with_dp_loss_backward)
def _dp_backward_flops(grad, loss_grad, logits, v, *args, out_shape=None,
                       **kwargs) -> int:
    return 2 * _flops(logits, v)


# ---------------------------------------- the logits passed on to a next use


class SoftmaxApplyPassingOn(torch.autograd.Function):
    """The fused softmax (with the DP loss given its grids) and the logits
    passed on as they are for another use (the next LA layer's transform,
    the Attention Residual): the backward adds that use's gradient into
    the logits' own in its kernel's pass (one read of the map), where
    autograd, seeing two uses, writes both gradients and adds them (three
    passes). Returns ``(out, loss or None, logits, lse, E or None)``."""

    @staticmethod
    def forward(logits, v, mask, dp_grids):
        # The logits passed on as a view (autograd saves no input that an
        # output is as it is).
        passed = logits.view_as(logits)
        if dp_grids is None:
            out, lse = softmax_apply_with_lse(logits, v, mask)
            return out, None, passed, lse, None
        out, loss, lse, e = softmax_apply_with_dp_loss(
            logits, v, *(list(hw) for hw in dp_grids))
        return out, loss, passed, lse, e

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, v, mask, dp_grids = inputs
        out, _, passed, lse, e = output
        ctx.save_for_backward(passed, v, mask, out, lse, e)
        ctx.dp_grids = dp_grids
        ctx.mark_non_differentiable(*(t for t in (lse, e) if t is not None))
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx, grad, loss_grad, other_grad, *_):
        return (*_softmax_backward(ctx, grad, loss_grad, other_grad), None,
                None)


def softmax_apply_passing_on(logits: torch.Tensor, v: torch.Tensor,
                             mask: Optional[torch.Tensor] = None,
                             dp_grids: Optional[Tuple[Sequence[int],
                                                      Sequence[int]]] = None
                             ) -> Tuple[torch.Tensor, Optional[torch.Tensor],
                                        torch.Tensor]:
    """:func:`softmax_apply_op` (given ``dp_grids``, the query and key
    grids: :func:`softmax_apply_dp_op`, no mask) that also passes the
    logits on for another use, whose gradient its backward adds in
    (:class:`SoftmaxApplyPassingOn`): ``(out, loss or None, logits)``."""
    out, loss, passed, _, _ = SoftmaxApplyPassingOn.apply(logits, v, mask,
                                                          dp_grids)
    return out, loss, passed
