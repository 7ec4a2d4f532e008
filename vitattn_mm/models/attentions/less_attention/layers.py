"""VA and LA layers: the two attentions of a Less-Attention network.

Vanilla Attention (VA) layers compute attention logits; Less-Attention (LA)
layers compute no ``Q K^T``: they transform the previous layer's
pre-softmax logits and apply their softmax to their own values (paper
Eq. 5). The logits travel in the :class:`LessAttentionState`.

Shapes: the logits are ``(B, heads, N_q, N_k)``: queries on the layer's
grid, keys on its spatially reduced grid (in windows, ``B`` counts windows
and both grids are the window). With PVT's spatial reductions 8, 4, 2, 1
every stage has the same key grid (ceil(H/32) x ceil(W/32); the reductions
pad like the patch embeddings), so only the query grid changes between
stages.
"""
from typing import List, NamedTuple, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn

from ....ops import (apply_probabilities, check_backend,
                     pool_queries_in_passing, pooled_op_serves,
                     softmax_apply_passing_on, uses_fused_op)
from ....registry import ATTENTIONS
from ...layers.padding import grid_after_stride
from ...layers.common import to_2tuple_int
from ...layers.windows import RelativePositionBias
from ..base import AttentionOutput, AttentionState, Grid, QueryAttention
from ..functional import (attention_logits, masked_softmax,
                          softmax_attention, softmax_query, split_heads)
from ..spatial_reduction import SpatialReduction, SpatialReductionAttention
from .loss import DP_LOSS_FORMS
from .plan import less_attention_layers
from .residual import build_attention_residual
from .state import DiagonalityMap, as_less_attention_state
from .transforms import build_attention_transform


class AppliedSoftmax(NamedTuple):
    """What :func:`apply_softmax` gives: the output, the logits to pass on
    to their next use, the probability map the eager softmax wrote (its
    queries pooled where the DP loss pools them; None from the fused op),
    and the DP loss where the fused op computed it (else None)."""
    out: torch.Tensor
    logits: torch.Tensor
    probs: Optional[torch.Tensor]
    dp_loss: Optional[torch.Tensor]


def apply_softmax(logits: torch.Tensor, v: torch.Tensor,
                  mask: Optional[torch.Tensor], dropout_p: float,
                  backend: str,
                  dp_grids: Optional[Tuple[Grid, Grid]] = None
                  ) -> AppliedSoftmax:
    """``softmax(logits + mask) v``, by the fused op where ``backend``
    chooses it, unless the attention weights are dropped out or the mask
    is boolean (the op takes neither). The fused op passes the logits on
    for their next use (:func:`~vitattn_mm.ops.softmax_apply_passing_on`:
    its backward adds that use's gradient into theirs in its pass) and
    writes no map; the eager composition writes the map, which the
    Diagonality-Preserving loss reads rather than computing a softmax of
    the logits again.

    ``dp_grids`` (the query and key grids) are given where the layer's
    bounded DP loss is collected. Without a mask (the loss reads the map
    without one): the fused op computes the loss too where the grids are
    the pooled loss's (:func:`~vitattn_mm.ops.pooled_op_serves`, LaViT's
    maps), its gradient in the softmax's pass; the eager map comes with
    its queries pooled onto the key grid where the grids differ, as the
    loss reads it (:func:`~vitattn_mm.ops.pool_queries_in_passing`)."""
    fusable = not dropout_p and (mask is None or mask.is_floating_point())
    if dp_grids is not None and mask is not None:
        dp_grids = None
    if fusable and uses_fused_op(backend, logits.device, v.dtype):
        if dp_grids is not None and not pooled_op_serves(*dp_grids):
            dp_grids = None
        out, loss, passed = softmax_apply_passing_on(logits, v, mask,
                                                     dp_grids)
        return AppliedSoftmax(out, passed, None, loss)
    probs = kept = masked_softmax(logits, mask)
    if dp_grids is not None and tuple(dp_grids[0]) != tuple(dp_grids[1]):
        probs, kept = pool_queries_in_passing(probs, *dp_grids)
    return AppliedSoftmax(apply_probabilities(probs, v, dropout_p), logits,
                          kept, None)


@ATTENTIONS.register_module()
class VanillaAttention(SpatialReductionAttention):
    """VA layer: softmax attention (paper Eq. 4) that keeps its logits for
    the layers after it.

    PVT's spatial-reduction attention (``sr_ratio``; corner-padded, so the
    key grid is ``ceil(H / sr) x ceil(W / sr)``), with Swin's relative
    position bias when it runs in a window (``window_size``). Its logits
    get the Attention Residual of the previous stage's last logits when it
    is a stage's first layer (``residual``). What it keeps for the layers
    after it (``keep_logits``) decides how the one softmax kernel runs:
    the map an LA layer transforms next is built once, written out
    (``True``); for the next stage's residual, which halves the queries
    before their product, the fused kernel runs and the state keeps the
    factors ``(q * scale, k, bias)`` (``'factors'``); otherwise the fused
    kernel runs and the state drops older logits (``False``).

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads.
        sr_ratio (int): Spatial reduction of keys and values. Default: 1.
        qkv_bias (bool): Bias in the q / kv projections. Default: True.
        keep_logits (bool | str): True, 'factors' or False (see above).
            Default: False.
        residual (dict, optional): The Attention Residual from the previous
            stage: ``dict(type='conv' | 'window', in_heads=...,
            layer_scale_init=0.1)`` (:class:`AttentionResidual`,
            :class:`WindowAttentionResidual`). Default: None.
        window_size (tuple[int, int], optional): The window it runs in
            (adds a relative position bias). Default: None.
        sr_padding (int | str): See :class:`SpatialReduction`.
            Default: 'corner'.
        attn_backend (str): 'auto', 'eager' or 'triton': how the softmax of
            a kept map is applied (:func:`apply_softmax`). Default: 'auto'.
        **kwargs: Other :class:`SpatialReductionAttention` arguments.
    """
    stateful = True
    grid_free = False

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 sr_ratio: int = 1,
                 qkv_bias: bool = True,
                 keep_logits: Union[bool, str] = False,
                 residual: Optional[dict] = None,
                 window_size: Optional[Grid] = None,
                 sr_padding: Union[int, str] = 'corner',
                 attn_backend: str = 'auto',
                 **kwargs):
        super().__init__(embed_dims, num_heads, sr_ratio, qkv_bias=qkv_bias,
                         sr_padding=sr_padding, **kwargs)
        self.attn_backend = check_backend(attn_backend)
        if keep_logits not in (True, False, 'factors'):
            raise ValueError("keep_logits must be True, 'factors' or False, "
                             f'got {keep_logits!r}')
        self.keep_logits = keep_logits
        self.relative_position_bias = None if window_size is None else \
            RelativePositionBias(to_2tuple_int(window_size), num_heads)
        self.residual = None if residual is None else \
            build_attention_residual(residual, num_heads, window_size)

    def logit_bias(self, state, hw_shape: Grid,
                   batch: int) -> Optional[torch.Tensor]:
        """The relative position bias plus, given kept logits, the Attention
        Residual: None, ``(heads, N_q, N_k)`` or ``(batch, heads, N_q,
        N_k)`` (a residual shared by an image's windows is repeated for
        each)."""
        bias = None if self.relative_position_bias is None else \
            self.relative_position_bias()
        if self.residual is None or not state.has_scores:
            return bias
        residual = self.residual(state, tuple(hw_shape))
        if bias is not None:
            # In the logits' dtype (an fp32 bias would promote the sum, as
            # large as the logits, and the logits cast it back).
            bias = bias.to(residual.dtype)
        if residual.shape[0] != batch:  # one per image, in windows
            # Each image's residual read once per window by the one pass
            # that adds the bias (or copies it), not repeated first.
            residual = residual[:, None].expand(
                -1, batch // residual.shape[0], *residual.shape[1:])
            return (residual if bias is None else residual + bias).flatten(
                0, 1)
        return residual if bias is None else residual + bias

    def forward(self,
                x: torch.Tensor,
                hw_shape: Grid,
                state: Optional[AttentionState] = None,
                mask: Optional[torch.Tensor] = None) -> AttentionOutput:
        state = as_less_attention_state(state)
        q, k, v, kv_hw = self.project(x, hw_shape)
        bias = self.logit_bias(state, hw_shape, q.shape[0])
        dropout = self.attn_drop if self.training else 0.
        if self.keep_logits is True:  # the map an LA layer transforms next
            # kept without the shift mask: an LA layer adds its own
            applied = apply_softmax(
                attention_logits(q, k, bias, self.scale), v, mask, dropout,
                self.attn_backend)
            out = applied.out
            kept = dict(logits=applied.logits, factors=None)
        else:
            out = softmax_attention(q, k, v, bias, mask, self.scale,
                                    dropout_p=dropout)
            if not self.keep_logits:
                return self.output(out), state.replace(logits=None,
                                                       factors=None)
            kept = dict(logits=None, factors=(q * self.scale, k, bias))
        return self.output(out), state.replace(
            query_hw=tuple(hw_shape), key_hw=kv_hw, windows=1, **kept)

    @torch.no_grad()
    def query_attention(self, x, hw_shape, index, state=None):
        """The softmax weights of query ``index`` (relative position bias
        and, given the state, the Attention Residual included)."""
        state = as_less_attention_state(state)
        if state.has_scores:
            state = state.first_image()
        q, k, _, kv_hw = self.project(x[:1], hw_shape)
        bias = self.logit_bias(state, hw_shape, 1)
        if bias is not None:
            bias = (bias if bias.dim() == 3 else bias[0])[:, index]
        return softmax_query(q[0], k[0], index, kv_hw, self.scale, bias)

    def extra_repr(self) -> str:
        return f'{super().extra_repr()}, keep_logits={self.keep_logits}'


@ATTENTIONS.register_module()
class LessAttention(SpatialReduction):
    """LA layer: no queries, no keys (paper Eq. 5).

    Transforms the previous layer's logits (from the state) with
    ``transform`` and applies their softmax to this layer's own values; the
    transformed logits replace them in the state. In a training pass with
    gradients and ``dp_loss_weight > 0`` they are also collected for the
    Diagonality-Preserving loss.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads.
        sr_ratio (int): Spatial reduction of the values. Default: 1.
        transform (nn.Module | dict): The transform, or its config:
            ``dict(type='conv', kernel_size=3)`` for
            :class:`ConvAttentionTransform` (any input size) or
            ``dict(type='dense', input_size=(H, W))`` for
            :class:`DenseAttentionTransform` on this layer's grids at that
            input size. Default: ``dict(type='conv')``.
        qkv_bias (bool): Bias in the v projection. Default: True.
        grid_size (tuple[int, int], optional): Query grid at the
            pretraining size (what the dense transform is built for).
            Default: None.
        dp_loss_weight (float): Weight of this layer's map in ``loss_dp``.
            Default: 0.
        dp_loss_form (str): 'bounded' (ours, see
            :func:`diagonality_preserving_loss`) or 'paper' (Eq. 9 as
            printed, :func:`paper_diagonality_loss`). Default: 'bounded'.
        sr_padding (int | str): See :class:`SpatialReduction`.
            Default: 'corner'.
        attn_drop (float): Dropout of the attention weights. Default: 0.
        attn_backend (str): 'auto', 'eager' or 'triton': how the conv
            transform convolves the logits (its fused op; see
            :class:`ConvAttentionTransform`). Default: 'auto'.
        **kwargs: Other :class:`SpatialReduction` arguments.
    """
    stateful = True
    takes_mask = True
    grid_free = False

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 sr_ratio: int = 1,
                 transform: Union[nn.Module, dict] = dict(type='conv'),
                 qkv_bias: bool = True,
                 grid_size: Optional[Grid] = None,
                 dp_loss_weight: float = 0.,
                 dp_loss_form: str = 'bounded',
                 sr_padding: Union[int, str] = 'corner',
                 attn_drop: float = 0.,
                 attn_backend: str = 'auto',
                 **kwargs):
        super().__init__(embed_dims, num_heads, sr_ratio,
                         sr_padding=sr_padding, **kwargs)
        self.attn_drop = attn_drop
        self.attn_backend = check_backend(attn_backend)
        if dp_loss_form not in DP_LOSS_FORMS:
            raise ValueError(f'dp_loss_form must be one of '
                             f'{sorted(DP_LOSS_FORMS)}, got {dp_loss_form!r}')
        self.dp_loss_weight = dp_loss_weight
        self.dp_loss_form = dp_loss_form
        self.v = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
        if isinstance(transform, dict):
            if transform.get('type') == 'conv':
                transform = dict(transform, attn_backend=attn_backend)
            transform = build_attention_transform(
                transform, num_heads, grid_size,
                None if grid_size is None else grid_after_stride(
                    grid_size, sr_ratio))
        self.transform = transform

    @classmethod
    def layer_plan(cls, depths: Sequence[int]) -> List[List[dict]]:
        """A VA layer keeping its logits, then LA layers, in every stage of
        more than one block (a plain ViT, whose stages are blocks, is one
        such stage)."""
        vanilla = dict(type='VanillaAttention')
        less = dict(type=cls.__name__, dp_loss_weight=0.1)
        if all(depth == 1 for depth in depths) and len(depths) > 1:
            layers, = less_attention_layers([len(depths)], [2], vanilla,
                                            less)
            return [[layer] for layer in layers]
        return less_attention_layers(
            depths, [2 if depth > 1 else 0 for depth in depths], vanilla,
            less)

    def forward(self,
                x: torch.Tensor,
                hw_shape: Grid,
                state: Optional[AttentionState] = None,
                mask: Optional[torch.Tensor] = None) -> AttentionOutput:
        state = as_less_attention_state(state)
        if not state.has_scores:
            raise ValueError(
                'LessAttention transforms the logits of the layer before '
                'it, and none were kept: build that VanillaAttention with '
                'keep_logits=True (less_attention_layers() does)')
        v_tokens, v_hw = self.reduce(x, hw_shape)
        v = split_heads(self.v(v_tokens), self.num_heads)
        logits = self.transform(state.scores(), tuple(hw_shape), v_hw)
        collect = self.dp_loss_weight > 0 and self.training and \
            torch.is_grad_enabled()
        bounded = collect and self.dp_loss_form == 'bounded'
        applied = apply_softmax(
            logits, v, mask, self.attn_drop if self.training else 0.,
            self.attn_backend, (tuple(hw_shape), v_hw) if bounded else None)
        maps = state.maps
        if collect:
            # The loss reads the map without the shift mask: a masked
            # softmax's is not the one it measures.
            maps = maps + (DiagonalityMap(
                applied.logits, tuple(hw_shape), v_hw, self.dp_loss_weight,
                self.dp_loss_form, self.attn_backend,
                applied.probs if mask is None else None, applied.dp_loss), )
        return self.output(applied.out), state.replace(
            logits=applied.logits, factors=None, query_hw=tuple(hw_shape),
            key_hw=v_hw, windows=1, maps=maps)

    @torch.no_grad()
    def query_attention(self, x, hw_shape, index, state=None):
        """The softmax weights of query ``index``: a row of the transformed
        logits of ``state`` (the previous layer's); the keys are the
        values' tokens."""
        state = as_less_attention_state(state)
        if not state.has_scores:
            raise ValueError('an LA layer draws from the logits of the layer '
                             'before it: give its state')
        v_tokens, v_hw = self.reduce(x[:1], hw_shape)
        logits = self.transform(state.first_image().scores(),
                                tuple(hw_shape), v_hw)
        v = split_heads(self.v(v_tokens), self.num_heads)[0]
        return QueryAttention(logits[0, :, index].softmax(-1), v_hw,
                              v.new_zeros(v.shape[0], v.shape[-1]), v,
                              self.head_dims**-0.5)

    def extra_repr(self) -> str:
        return (f'{super().extra_repr()}, '
                f'dp_loss_weight={self.dp_loss_weight}')
