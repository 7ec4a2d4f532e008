"""Mean-shift attention as a custom op (``torch.ops.vitattn``).

``softmax((q k^T - ||k||^2 / 2) s + bias + mask) v - p`` per head, from
the packed ``(B, N, parts * C)`` projection (q, k, v and, with the mean
shift, the probe p) to the ``(B, N, C)`` output with the heads merged: one
op each way where the eager composition runs a key-norm reduction, a
broadcast bias the fused SDPA kernel must read at full size (and write at
full size in its backward), the probe's subtraction and the head merge.
As :mod:`.linear_attention`: the eager composition is the reference and
the CPU path, the shape function serves ``torch.compile`` and the cost
model, the kernels (:mod:`.triton_mean_shift_attention`) run on CUDA (and
on the CPU under ``TRITON_INTERPRET=1``).
"""
from typing import List, Optional, Tuple

import torch
from torch.utils.flop_counter import (register_flop_formula,
                                      sdpa_backward_flop_count,
                                      sdpa_flop_count)

from ..models.layers.size_aware import MASK_ALIGNMENT, capturing
from .backend import interpreting, kernels_run_on
from .common import block_d, eager_grads, rows, save_with_aux, saved_inputs


def split_parts(qkv: torch.Tensor, num_heads: int,
                parts: int) -> Tuple[torch.Tensor, ...]:
    """q, k, v (and p) of the packed ``(B, N, parts * C)`` projection, each
    ``(B, heads, N, d)``: unbound, so the backward stacks their gradients
    in one tensor (indexing each part would fill a zero tensor per part)."""
    B, N, width = qkv.shape
    return qkv.view(B, N, parts, num_heads,
                    width // parts // num_heads).permute(2, 0, 3, 1,
                                                         4).unbind(0)


def key_norm_logits(k: torch.Tensor, scale: float) -> torch.Tensor:
    """MSF's key term of the logits, ``-||k||^2 s / 2``: ``(..., 1, N)``,
    the same for every query (the ``||q||^2`` term of the Gaussian kernel
    cancels in the softmax).

    The squared norm, not a sum of squares: autocast runs ``pow`` in fp32,
    a cast and a power over every key (and their gradients), where the
    norm reads bf16 keys and accumulates in fp32 in one kernel."""
    norm = torch.linalg.vector_norm(k, dim=-1)
    return norm.square().unsqueeze(-2) * (-0.5 * scale)


def mean_shift_logit_term(
        k: torch.Tensor, scale: float, bias: Optional[torch.Tensor],
        mask: Optional[torch.Tensor], dtype: torch.dtype
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """The additive term of mean-shift logits and the mask still to add:
    the key term (:func:`key_norm_logits`) plus ``bias`` and ``mask`` as
    :func:`~vitattn_mm.models.attentions.functional.softmax_attention`
    takes them.

    The key term differs per window and the bias or mask per query, so
    their sum is as large as the logits. Eagerly it is written once, in
    ``dtype`` and with rows as the fused SDPA kernel reads them in place
    (:class:`MeanShiftLogitTerm`: autograd added the key term, then the
    mask, cast and padded the sum, and walked each pass back), and the
    mask is in it (None returned). A captured graph takes the plain sum.
    """
    from ..models.attentions.functional import window_logit_bias
    if capturing():
        key = key_norm_logits(k, scale)
        return (key if bias is None else bias + key), mask
    term = window_logit_bias(bias, mask, k.shape[0])
    if term is not None and term.dtype == torch.bool:
        term = torch.where(term, 0., float('-inf'))
    windows = 1 if mask is None else mask.shape[0]
    align = 1 if k.device.type == 'cpu' else MASK_ALIGNMENT
    return MeanShiftLogitTerm.apply(k, term, scale, windows, dtype,
                                    align), None


class MeanShiftLogitTerm(torch.autograd.Function):
    """``key_norm_logits(k, scale) + term`` for ``(B * windows, heads, N,
    d)`` keys and a ``term`` broadcastable to ``(windows, heads, N, N)``
    (or None), written in ``dtype`` (summed in fp32), its rows ``align``
    elements apart: the sum in one pass, which the fused SDPA kernel
    reads in place.

    Backward: the term's gradient summed over the images in fp32, and the
    keys' in closed form, ``dk = -s k sum_q(g)`` (autograd's through the
    norm and its square divides by the norm, masks its zeros, scales and
    casts back): each a pass over the gradient, one over the keys.
    """

    @staticmethod
    def forward(k: torch.Tensor, term: Optional[torch.Tensor], scale: float,
                windows: int, dtype: torch.dtype, align: int):
        key = key_norm_logits(k, scale).unflatten(0, (-1, windows))
        shape = key.shape if term is None else torch.broadcast_shapes(
            term.shape, key.shape)
        n = shape[-1]
        out = key.new_empty(*shape[:-1], n + -n % align, dtype=dtype)
        out = out[..., :n]
        if term is None:
            out.copy_(key)
        else:
            torch.add(term, key, out=out)
        return out.flatten(0, 1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        k, term, ctx.scale, ctx.windows, _, _ = inputs
        ctx.term_shape = None if term is None else term.shape
        ctx.save_for_backward(k)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        k, = ctx.saved_tensors
        # Sums at least in fp32 (of a bf16 gradient), written so.
        acc = torch.promote_types(g.dtype, torch.float32)
        grad_term = None
        if ctx.needs_input_grad[1]:
            images = g.unflatten(0, (-1, ctx.windows))
            lead = images.dim() - len(ctx.term_shape)
            grad_term = images.sum(dim=tuple(range(lead)), dtype=acc)
            grad_term = grad_term.sum_to_size(ctx.term_shape)
        grad_k = None
        if ctx.needs_input_grad[0]:
            per_key = g.sum(-2, dtype=acc).unsqueeze(-1) * -ctx.scale
            # Multiplied in fp32, written in the keys' dtype: one kernel.
            grad_k = torch.mul(k, per_key, out=torch.empty_like(k))
        return grad_k, grad_term, None, None, None, None


def mean_shift_attention_eager(qkv: torch.Tensor,
                               bias: Optional[torch.Tensor],
                               mask: Optional[torch.Tensor],
                               num_heads: int,
                               scale: float,
                               mean_shift: bool,
                               dropout_p: float = 0.,
                               fused: bool = True) -> torch.Tensor:
    """The eager composition (the module's own computation).

    Args:
        qkv (Tensor): ``(B, N, parts * C)``: q, k, v (and p).
        bias (Tensor, optional): ``(heads, N, N)`` added to the logits of
            every image (Swin's relative position bias).
        mask (Tensor, optional): ``(nW, N, N)`` additive mask of the
            windows, the batch holding each image's ``nW`` windows in turn.
        num_heads (int): Heads.
        scale (float): Logit scale.
        mean_shift (bool): The key-norm term and the probe (4 parts); else
            softmax attention (3 parts).
        dropout_p (float): Dropout of the attention weights (the eager
            path only). Default: 0.
        fused (bool): PyTorch's fused SDPA; False: matmul, softmax,
            matmul. Default: True.

    Returns:
        Tensor: ``(B, N, C)``.
    """
    # The module's functions, imported here: the models import this
    # package, not the other way round.
    from ..models.attentions.functional import merge_heads, softmax_attention
    q, k, v, *probe = split_parts(qkv, num_heads, 4 if mean_shift else 3)
    if mean_shift:
        bias, mask = mean_shift_logit_term(k, scale, bias, mask, q.dtype)
    out = softmax_attention(q, k, v, bias, mask, scale, dropout_p=dropout_p,
                            fused=fused)
    if mean_shift:
        out = out - probe[0]
    return merge_heads(out)


def _kernels():
    from . import triton_mean_shift_attention
    return triton_mean_shift_attention


def _launch(qkv, bias, mask, num_heads, scale, mean_shift):
    """The forward kernel: the output and the rows' log-sum-exp."""
    tk = _kernels()
    B, N, width = qkv.shape
    C = width // (4 if mean_shift else 3)
    D = C // num_heads
    out = qkv.new_empty(B, N, C)
    lse = torch.empty(B * num_heads, N, device=qkv.device,
                      dtype=torch.float32)
    grid = (-(-N // tk.BLOCK), B * num_heads)
    tk.forward_kernel[grid](
        qkv, qkv.stride(0), qkv.stride(1), qkv if bias is None else bias,
        qkv if mask is None else mask, out, out.stride(0), out.stride(1),
        lse, N, C, num_heads, 1 if mask is None else mask.shape[0],
        float(scale), D, MEAN_SHIFT=mean_shift, HAS_BIAS=bias is not None,
        HAS_MASK=mask is not None, BLOCK_M=tk.BLOCK, BLOCK_N=tk.BLOCK,
        BLOCK_D=block_d(D), UPCAST=_upcast(qkv), num_warps=tk.NUM_WARPS)
    return out, lse


#: Copies of the bias gradient the windows spread their atomics over.
BIAS_GRAD_SLOTS = 32


def _upcast(qkv: torch.Tensor) -> bool:
    """Products in fp32 where Triton's interpreter gets bf16 ones wrong."""
    return qkv.dtype == torch.bfloat16 and interpreting()


@torch.library.custom_op('vitattn::mean_shift_attention', mutates_args=())
def mean_shift_attention_with_lse(qkv: torch.Tensor,
                                  bias: Optional[torch.Tensor],
                                  mask: Optional[torch.Tensor],
                                  num_heads: int, scale: float,
                                  mean_shift: bool) -> List[torch.Tensor]:
    """:func:`mean_shift_attention_eager` as one op, and the rows' fp32
    log-sum-exp ``(B * heads, N)`` (not differentiable), which its
    backward reads instead of running the forward kernel again (zeros on
    the CPU path, whose backward differentiates the composition)."""
    if not kernels_run_on(qkv.device):
        return [mean_shift_attention_eager(qkv, bias, mask, num_heads, scale,
                                           mean_shift),
                qkv.new_zeros(qkv.shape[0] * num_heads, qkv.shape[1],
                              dtype=torch.float32)]
    return list(_launch(rows(qkv), _contiguous(bias), _contiguous(mask),
                        num_heads, scale, mean_shift))


def mean_shift_attention_op(qkv: torch.Tensor, bias: Optional[torch.Tensor],
                            mask: Optional[torch.Tensor], num_heads: int,
                            scale: float, mean_shift: bool) -> torch.Tensor:
    """:func:`mean_shift_attention_eager` as one op
    (``vitattn::mean_shift_attention``, whose log-sum-exp stays with
    autograd)."""
    return mean_shift_attention_with_lse(qkv, bias, mask, num_heads, scale,
                                         mean_shift)[0]


def _contiguous(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return None if t is None else t.contiguous()


@mean_shift_attention_with_lse.register_fake
def _(qkv, bias, mask, num_heads, scale, mean_shift):
    B, N, width = qkv.shape
    return [qkv.new_empty(B, N, width // (4 if mean_shift else 3)),
            qkv.new_empty(B * num_heads, N, dtype=torch.float32)]


@torch.library.custom_op('vitattn::mean_shift_attention_backward',
                         mutates_args=())
def mean_shift_attention_backward_op(
        grad: torch.Tensor, qkv: torch.Tensor, bias: Optional[torch.Tensor],
        mask: Optional[torch.Tensor], num_heads: int, scale: float,
        mean_shift: bool, lse: torch.Tensor) -> List[torch.Tensor]:
    """Gradients of ``qkv`` and ``bias`` (empty without a bias), given the
    forward's log-sum-exp. The mask is a constant."""
    if not kernels_run_on(qkv.device):
        return eager_grads(mean_shift_attention_eager, grad, (qkv, bias),
                            (mask, num_heads, scale, mean_shift))
    tk = _kernels()
    qkv, bias, mask, grad = (rows(qkv), _contiguous(bias),
                             _contiguous(mask), rows(grad))
    B, N, width = qkv.shape
    C = width // (4 if mean_shift else 3)
    D = C // num_heads
    delta = torch.empty_like(lse)
    grid = (-(-N // tk.BLOCK), B * num_heads)
    flags = dict(MEAN_SHIFT=mean_shift, BLOCK_D=block_d(D),
                 UPCAST=_upcast(qkv), num_warps=tk.NUM_WARPS)
    dqkv = torch.empty(qkv.shape, device=qkv.device, dtype=qkv.dtype)
    # Windows share the bias: each adds its gradient into one of ``slots``
    # copies (fewer atomics on one address), summed below.
    slots = min(B, BIAS_GRAD_SLOTS) if bias is not None else 1
    dbias = torch.zeros((slots, *bias.shape) if bias is not None else (1, ),
                        device=qkv.device, dtype=torch.float32)
    shared = (qkv, qkv.stride(0), qkv.stride(1),
              qkv if bias is None else bias, qkv if mask is None else mask,
              grad, grad.stride(0), grad.stride(1), lse, delta, dqkv,
              dqkv.stride(0), dqkv.stride(1))
    sizes = (N, C, num_heads, 1 if mask is None else mask.shape[0],
             float(scale), D)
    flags.update(HAS_BIAS=bias is not None, HAS_MASK=mask is not None,
                 BLOCK_M=tk.BLOCK, BLOCK_N=tk.BLOCK)
    tk.query_backward_kernel[grid](*shared, *sizes, **flags)  # delta first
    tk.key_backward_kernel[grid](*shared, dbias, slots, *sizes,
                                 BIAS_GRAD=bias is not None, **flags)
    return [dqkv, qkv.new_empty(0) if bias is None else
            dbias.sum(0).to(bias.dtype)]


@mean_shift_attention_backward_op.register_fake
def _(grad, qkv, bias, mask, num_heads, scale, mean_shift, lse):
    return [torch.empty_like(qkv),
            qkv.new_empty(0) if bias is None else torch.empty_like(bias)]


def _backward(ctx, grads):
    if grads[0] is None:
        return (None, ) * 6
    qkv, bias, mask, heads, scale, mean_shift, lse = saved_inputs(ctx)
    dqkv, dbias = mean_shift_attention_backward_op(grads[0], qkv, bias,
                                                   mask, heads, scale,
                                                   mean_shift, lse)
    return dqkv, None if bias is None else dbias, None, None, None, None


mean_shift_attention_with_lse.register_autograd(
    _backward, setup_context=save_with_aux)


def _attention_shapes(qkv, num_heads, mean_shift):
    B, N, width = qkv
    D = width // (4 if mean_shift else 3) // num_heads
    return (B, num_heads, N, D)


@register_flop_formula(torch.ops.vitattn.mean_shift_attention)
def _flops(qkv, bias, mask, num_heads, scale, mean_shift, *args,
           out_shape=None, **kwargs) -> int:
    shape = _attention_shapes(qkv, num_heads, mean_shift)
    return sdpa_flop_count(shape, shape, shape)


@register_flop_formula(torch.ops.vitattn.mean_shift_attention_backward)
def _backward_flops(grad, qkv, bias, mask, num_heads, scale, mean_shift,
                    *args, out_shape=None, **kwargs) -> int:
    shape = _attention_shapes(qkv, num_heads, mean_shift)
    return sdpa_backward_flop_count(shape, shape, shape, shape)
