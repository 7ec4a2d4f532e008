"""Less-Attention's score-map convolutions as a custom op
(``torch.ops.vitattn.score_conv``).

Each head's ``(N_q, N_k)`` logits convolved by a depthwise ``K x K`` kernel
over the key grid, then by one over the query grid (the two convolutions of
:class:`~vitattn_mm.models.attentions.less_attention.transforms.ConvAttentionTransform`;
and, given it, its 1x1 head mix, folded into the query conv). Eagerly that
is two convolutions per head on the CPU, and on a GPU two 3-D ones of all
heads over views of the map; the op is one pass over the map per
convolution (two forward, three backward), the map between them in fp32.
As
:mod:`.linear_attention`: the eager composition is the reference and the
CPU path, the shape function serves ``torch.compile``
and the cost model, the kernels (:mod:`.triton_score_conv`) run on CUDA
(and on the CPU under ``TRITON_INTERPRET=1``).
"""
from typing import List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import register_flop_formula

from ..models.layers.size_aware import (capturing, token_depthwise_conv,
                                        token_pointwise_conv)
from .backend import kernels_run_on
from .common import eager_grads, save_inputs, saved_inputs


def one_head_at_a_time(logits: torch.Tensor) -> bool:
    """Whether :func:`score_conv_eager` convolves head by head, each conv
    in the layout the scores have: on the CPU, where the channels-last
    query conv is the fastest (the batched route's 3-D convs measured
    1.4-4x slower there, forward and backward). A GPU, where
    every kernel launch costs, and a captured graph take every head at
    once."""
    return logits.device.type == 'cpu' and not capturing()


def score_conv_eager(logits: torch.Tensor, key_weight: torch.Tensor,
                     query_weight: torch.Tensor, query_hw: Sequence[int],
                     key_hw: Sequence[int],
                     head_mix: Optional[torch.Tensor] = None
                     ) -> torch.Tensor:
    """The two depthwise convolutions of every head, eagerly, and the 1x1
    mix of the heads after them if given.

    Args:
        logits (Tensor): ``(B, heads, N_q, N_k)``.
        key_weight (Tensor): ``(heads, 1, K, K)``: the conv over the key
            grid.
        query_weight (Tensor): ``(heads, 1, K, K)``: the conv over the
            query grid.
        query_hw (tuple[int, int]): Grid of the ``N_q`` queries.
        key_hw (tuple[int, int]): Grid of the ``N_k`` keys.
        head_mix (Tensor, optional): ``(heads, heads, 1, 1)``: the 1x1
            conv across heads after the two (``ConvAttentionTransform``'s
            head mix). Default: None (no mix).

    Returns:
        Tensor: ``(B, heads, N_q, N_k)``.
    """
    # A head's (N_q, key grid) scores are N_q images of the key grid in
    # NCHW and, read as channels-last, N_k images of the query grid.
    B, h, Nq, Nk = logits.shape
    if one_head_at_a_time(logits):
        # The heads come apart by unbind: its backward is one stack, not
        # a zero map of every head per head.
        heads = []
        for i, x in enumerate(logits.unbind(1)):
            x = token_depthwise_conv(x.reshape(B, 1, Nq, *key_hw),
                                     key_weight[i:i + 1])
            x = x.reshape(B, 1, *query_hw, Nk).permute(0, 1, 4, 2, 3)
            x = token_depthwise_conv(x, query_weight[i:i + 1])
            heads.append(x.permute(0, 1, 3, 4, 2).reshape(B, Nq, Nk))
        return _mixed(torch.stack(heads, 1), head_mix)
    # Every head at once: one conv per axis, each a 3-D conv over a view
    # of the map (the query grid's with the keys as its last axis), so
    # the map is never transposed (LessAttn-Swin-T's projected step 1,670
    # -> 1,606 ops, 0.95 GB less than with the transposes between them).
    x = token_depthwise_conv(logits.reshape(B, h, Nq, *key_hw), key_weight)
    x = x.view(B, h, *query_hw, Nk)
    if head_mix is None or h > FOLDED_MIX_MAX_HEADS:
        x = token_depthwise_conv(x, query_weight, maps_last=True)
        return _mixed(x.view(B, h, Nq, Nk), head_mix)
    # The mix is linear in the heads: with the query conv it is one dense
    # conv, kernels mix[o, i] * query_kernel[i]: one pass over the map
    # each way where the two convs took two.
    pad = query_weight.shape[-1] // 2
    x = F.conv3d(x, (head_mix * query_weight.transpose(0, 1))[..., None],
                 padding=(pad, pad, 0))
    return x.view(B, h, Nq, Nk)


#: Most heads whose 1x1 mix :func:`score_conv_eager` folds into the query
#: conv, and ``ConvAttentionTransform`` into the fused op's query pass
#: (since 0.5.13). The dense conv has ``heads`` times the depthwise one's
#: FLOPs: with LaViT's 5 and 8 heads the pass it saves outweighs them in
#: both of the cost model's presets for the eager convs (LaViT-S's step
#: 21.2 -> 20.5 ms projected, 78.5 -> 78.2 in the fit to the H200), with
#: Swin's 12 and 24 not in the fit (which runs aten's FLOPs at 3% of the
#: peak). The fused op: 16.7 -> 15.9 ms in the roofline preset (the fit,
#: whose Triton kernels run at 7.5% of aten's roofline, prices the FLOPs
#: above the pass: docs/benchmarks.md).
FOLDED_MIX_MAX_HEADS = 8


def _mixed(maps: torch.Tensor, head_mix: Optional[torch.Tensor]
           ) -> torch.Tensor:
    # (B, heads, N_q, N_k) is NCHW with the heads as channels.
    return maps if head_mix is None else token_pointwise_conv(maps, head_mix)


def _kernels():
    from . import triton_score_conv
    return triton_score_conv


def _grid(tk, logits):
    B, h, Nq, Nk = logits.shape
    return (B * h, -(-Nq // tk.BLOCK_Q), -(-Nk // tk.BLOCK_K))


def _conv_pass(src, dst, weight, query_hw, key_hw, over_keys,
               forward_input=None, weight_grad=None):
    """One depthwise conv of every map (:func:`conv_pass_kernel`): ``dst``
    from ``src``. With ``forward_input`` it is the transposed conv of the
    gradient ``src`` of a conv that read ``forward_input``, and adds that
    conv's weight gradient to ``weight_grad`` (fp32)."""
    tk = _kernels()
    transposed = forward_input is not None
    tk.conv_pass_kernel[_grid(tk, src)](
        src, dst, weight.contiguous(),
        forward_input if transposed else src,
        weight_grad if transposed else weight, src.shape[1], *src.shape[2:],
        *query_hw, *key_hw, K=weight.shape[-1], OVER_KEYS=over_keys,
        MIRROR=transposed, WEIGHT_GRAD=transposed, BLOCK_Q=tk.BLOCK_Q,
        BLOCK_K=tk.BLOCK_K, num_warps=tk.NUM_WARPS)
    return dst


def _query_pass(src, dst, weight, head_mix, query_hw, key_hw,
                forward_input=None, weight_grad=None, mix_grad=None):
    """The query conv of every map, with the head mix after it if given
    (:func:`mixed_conv_pass_kernel`), or its transpose (given
    ``forward_input``), which adds to the gradients of both (fp32)."""
    if head_mix is None:
        return _conv_pass(src, dst, weight, query_hw, key_hw, False,
                          forward_input, weight_grad)
    tk = _kernels()
    transposed = forward_input is not None
    tk.mixed_conv_pass_kernel[_grid(tk, src)](
        src, dst, weight.contiguous(), head_mix.contiguous(),
        forward_input if transposed else src,
        weight_grad if transposed else weight,
        mix_grad if transposed else head_mix, src.shape[1], *src.shape[2:],
        *query_hw, *key_hw, K=weight.shape[-1], TRANSPOSED=transposed,
        BLOCK_Q=tk.BLOCK_Q, BLOCK_K=tk.BLOCK_K, num_warps=tk.NUM_WARPS)
    return dst


@torch.library.custom_op('vitattn::score_conv', mutates_args=())
def score_conv_op(logits: torch.Tensor, key_weight: torch.Tensor,
                  query_weight: torch.Tensor, query_hw: List[int],
                  key_hw: List[int],
                  head_mix: Optional[torch.Tensor] = None) -> torch.Tensor:
    """:func:`score_conv_eager` as one op: the head mix, given, is folded
    into the query conv's pass whatever the heads (the caller chooses
    when: :data:`FOLDED_MIX_MAX_HEADS`)."""
    if not kernels_run_on(logits.device):
        return score_conv_eager(logits, key_weight, query_weight, query_hw,
                                key_hw, head_mix)
    logits = logits.contiguous()
    # The map between the two convs stays fp32, as inside one kernel.
    keyed = _conv_pass(logits, torch.empty_like(logits, dtype=torch.float32),
                       key_weight, query_hw, key_hw, over_keys=True)
    return _query_pass(keyed, torch.empty_like(logits), query_weight,
                       head_mix, query_hw, key_hw)


@score_conv_op.register_fake
def _(logits, key_weight, query_weight, query_hw, key_hw, head_mix=None):
    return torch.empty_like(logits)


@torch.library.custom_op('vitattn::score_conv_backward', mutates_args=())
def score_conv_backward_op(grad: torch.Tensor, logits: torch.Tensor,
                           key_weight: torch.Tensor,
                           query_weight: torch.Tensor, query_hw: List[int],
                           key_hw: List[int],
                           head_mix: Optional[torch.Tensor] = None
                           ) -> List[torch.Tensor]:
    """Gradients of the logits, of both kernels and of the head mix (an
    empty tensor without one)."""
    if not kernels_run_on(logits.device):
        return eager_grads(
            lambda *tensors: score_conv_eager(*tensors[:3], query_hw,
                                              key_hw, tensors[3]),
            grad, (logits, key_weight, query_weight, head_mix), ())
    logits, grad = logits.contiguous(), grad.contiguous()
    f32 = dict(device=logits.device, dtype=torch.float32)
    dkey, dquery = (torch.zeros(key_weight.shape, **f32),
                    torch.zeros(query_weight.shape, **f32))
    dmix = None if head_mix is None else torch.zeros(head_mix.shape, **f32)
    # The key conv's output again (cheaper than keeping it), then each
    # conv transposed with its weight's gradient; the maps between in fp32.
    keyed = _conv_pass(logits, torch.empty_like(logits, dtype=torch.float32),
                       key_weight, query_hw, key_hw, over_keys=True)
    dkeyed = _query_pass(grad, torch.empty_like(grad, dtype=torch.float32),
                         query_weight, head_mix, query_hw, key_hw,
                         forward_input=keyed, weight_grad=dquery,
                         mix_grad=dmix)
    dlogits = _conv_pass(dkeyed, torch.empty_like(logits), key_weight,
                         query_hw, key_hw, over_keys=True,
                         forward_input=logits, weight_grad=dkey)
    return [dlogits, dkey.to(key_weight.dtype), dquery.to(query_weight.dtype),
            grad.new_empty(0) if dmix is None else dmix.to(head_mix.dtype)]


@score_conv_backward_op.register_fake
def _(grad, logits, key_weight, query_weight, query_hw, key_hw,
      head_mix=None):
    return [torch.empty_like(logits), torch.empty_like(key_weight),
            torch.empty_like(query_weight),
            grad.new_empty(0) if head_mix is None else
            torch.empty_like(head_mix)]


def _backward(ctx, grad):
    inputs = saved_inputs(ctx)
    dlogits, dkey, dquery, dmix = score_conv_backward_op(grad, *inputs)
    return (dlogits, dkey, dquery, None, None,
            None if inputs[-1] is None else dmix)


score_conv_op.register_autograd(_backward, setup_context=save_inputs)


@register_flop_formula(torch.ops.vitattn.score_conv)
def _flops(logits, key_weight, query_weight=None, query_hw=None,
           key_hw=None, head_mix=None, out_shape=None, **kwargs) -> int:
    """Two convolutions of the map (as the eager ones count): depthwise,
    the query conv dense over the heads with the mix folded in."""
    B, h, Nq, Nk = logits
    return 2 * B * h * Nq * Nk * key_weight[-1]**2 * (
        1 + (1 if head_mix is None else h))


@register_flop_formula(torch.ops.vitattn.score_conv_backward)
def _backward_flops(grad, logits, key_weight, query_weight=None,
                    query_hw=None, key_hw=None, head_mix=None,
                    out_shape=None, **kwargs) -> int:
    return 2 * _flops(logits, key_weight, head_mix=head_mix)
