"""LaViT: Less-Attention, as stateful attentions that plug into every
skeleton, and the paper's backbones.

Zhang et al., "You Only Need Less Attention at Each Stage in Vision
Transformers", CVPR 2024 (https://arxiv.org/abs/2406.00427). No official
code exists; this is our reading of the paper, made to serve dense
prediction (see ``docs/lavit.md`` for every decision and deviation).

Vanilla Attention (VA) layers compute attention logits; Less-Attention (LA)
layers compute no ``Q K^T``: they transform the previous layer's
pre-softmax logits and apply their softmax to their own values (paper
Eq. 5). The Attention Residual (Eq. 6-7) carries a stage's last logits into
the first VA layer of the next, and the Diagonality-Preserving loss (Eq. 9,
in a bounded, resolution-independent form) keeps the transformed maps
attention-like. The logits travel in a :class:`LessAttentionState`, the
explicit state of the attention protocol: any skeleton threads it through
its blocks, so :class:`VanillaAttention` and :class:`LessAttention` work in
the PVT, ViT, Swin (in windows), CSwin and L2ViT skeletons alike, and the
skeleton hands the state's ``loss_dp`` to the task model.

Shapes: the logits are ``(B, heads, N_q, N_k)``: queries on the layer's
grid, keys on its spatially reduced grid (in windows, ``B`` counts windows
and both grids are the window). With PVT's spatial reductions 8, 4, 2, 1
every stage has the same key grid (ceil(H/32) x ceil(W/32); the reductions
pad like the patch embeddings), so only the query grid changes between
stages.
"""
import dataclasses
import math
from typing import List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.model import BaseModule
from mmpretrain.models.utils import LayerScale

from ...registry import ATTENTIONS, register_model
from ..layers import (AttentionState, QueryAttention, RelativePositionBias,
                      split_heads, to_2tuple_int)
from ..layers.padding import grid_after_stride, is_capturing
from .pvt import PVT_WIDTHS, AttnPVT, SpatialReduction, \
    SpatialReductionAttention
from .swin import AttnSwinTransformer
from .vit import NO_CLS_TOKEN_SCOPE_DEFAULTS, AttnViT

Grid = Tuple[int, int]


# --------------------------------------------------------------- transforms
class ConvAttentionTransform(BaseModule):
    """Resolution-agnostic Less-Attention transform (our default).

    ``A -> HeadMix(QueryConv(KeyConv(A)))`` on logits ``(B, h, N_q, N_k)``:
    a depthwise ``k x k`` conv over the key grid (each query's row of logits
    seen as an image), one over the query grid (each key's column), and a
    1x1 mix across heads, with one kernel per head. Like the paper's
    ``Psi(Theta(A)^T)^T`` these are linear maps along the key axis and along
    the query axis, only banded instead of dense, so the same weights serve
    every input size. Initialised to the identity: an untrained LA layer
    reuses the previous layer's attention exactly.

    No biases: each would add a per-head constant to the logits, which
    shifts whole softmax rows and so cannot change the attention.

    Args:
        num_heads (int): Heads of the logits.
        kernel_size (int): Odd kernel size of both depthwise convs.
            Default: 3.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """

    def __init__(self,
                 num_heads: int,
                 kernel_size: int = 3,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        if kernel_size % 2 == 0:
            raise ValueError(f'kernel_size must be odd, got {kernel_size}')
        self.key_conv = nn.Conv2d(num_heads, num_heads, kernel_size,
                                  padding=kernel_size // 2, groups=num_heads,
                                  bias=False)
        self.query_conv = nn.Conv2d(num_heads, num_heads, kernel_size,
                                    padding=kernel_size // 2,
                                    groups=num_heads, bias=False)
        self.head_mix = nn.Conv2d(num_heads, num_heads, 1, bias=False)
        self.reset_parameters()

    @property
    def halo(self) -> int:
        """Rows of the query grid on each side that one output row reads."""
        return self.query_conv.kernel_size[0] // 2

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Identity: centre taps 1, no mixing across heads."""
        for conv in (self.key_conv, self.query_conv):
            conv.weight.zero_()
            centre = conv.kernel_size[0] // 2
            conv.weight[:, :, centre, centre] = 1
        self.head_mix.weight.copy_(
            torch.eye(self.head_mix.out_channels)[:, :, None, None])

    def forward(self, logits: torch.Tensor, query_hw: Grid,
                key_hw: Grid) -> torch.Tensor:
        # The maps are never transposed. A head's (N_q, key grid) scores
        # are N_q images of the key grid in NCHW and, read as channels-last,
        # N_k images of the query grid: each conv runs in the layout the
        # scores already have, one head at a time (its kernel shared by all
        # the head's rows / columns), and the heads mix per score.
        B, h, Nq, Nk = logits.shape
        if is_capturing():
            return self._forward_batched(logits, query_hw, key_hw)
        pad = self.key_conv.padding
        heads = []
        for i in range(h):
            x = logits[:, i].reshape(B, Nq, *key_hw)
            x = F.conv2d(x, self.key_conv.weight[i:i + 1].expand(Nq, -1, -1,
                                                                -1),
                         padding=pad, groups=Nq)
            x = x.reshape(B, *query_hw, Nk).permute(0, 3, 1, 2)
            x = F.conv2d(x, self.query_conv.weight[i:i + 1].expand(
                Nk, -1, -1, -1), padding=pad, groups=Nk)
            heads.append(x.permute(0, 2, 3, 1).reshape(B, Nq, Nk))
        # (B, heads, N_q, N_k) is NCHW with the heads as channels.
        return self.head_mix(torch.stack(heads, 1))

    def _forward_batched(self, logits: torch.Tensor, query_hw: Grid,
                         key_hw: Grid) -> torch.Tensor:
        """The same transform with the token counts in the batch dimension
        and the layers' own h-channel kernels. ``forward`` uses it while a
        graph is captured: kernels and groups that grow with the token count
        cannot be symbolic (ONNX needs static kernel shapes; ``torch.compile``
        would recompile for every size)."""
        B, h, Nq, Nk = logits.shape
        x = logits.transpose(1, 2).reshape(B * Nq, h, *key_hw)
        x = self.key_conv(x).reshape(B, Nq, h, Nk)
        x = x.permute(0, 3, 2, 1).reshape(B * Nk, h, *query_hw)
        x = self.head_mix(self.query_conv(x))
        return x.reshape(B, Nk, h, Nq).permute(0, 2, 3, 1)


class DenseAttentionTransform(BaseModule):
    """The paper's Less-Attention transform (Eq. 5), for one input size.

    ``A -> Psi(Theta(A)^T)^T``: ``Theta`` an ``N_k x N_k`` map along the key
    axis, ``Psi`` an ``N_q x N_q`` map along the query axis, shared by the
    heads, identity-initialised. The maps fix N: other input sizes raise.
    Cost ``heads * N_q * N_k * (N_q + N_k)`` per layer, quadratic in the
    tokens; meant for fixed-size classification.

    Args:
        query_hw (tuple[int, int]): Query grid the maps are built for.
        key_hw (tuple[int, int]): Key grid the maps are built for.
        input_size (tuple[int, int]): The image size these grids come from
            (for the error message).
        init_cfg (dict, optional): Initialisation config. Default: None.
    """

    def __init__(self,
                 query_hw: Grid,
                 key_hw: Grid,
                 input_size: Grid,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        self.query_hw, self.key_hw = tuple(query_hw), tuple(key_hw)
        self.input_size = tuple(input_size)
        self.key_weight = nn.Parameter(torch.eye(math.prod(key_hw)))  # Theta
        self.query_weight = nn.Parameter(torch.eye(math.prod(query_hw)))  # Psi

    def forward(self, logits: torch.Tensor, query_hw: Grid,
                key_hw: Grid) -> torch.Tensor:
        if (tuple(query_hw), tuple(key_hw)) != (self.query_hw, self.key_hw):
            raise ValueError(
                "LaViT's dense Less-Attention transform "
                "(la_transform='dense') is built for "
                f'{self.input_size[0]}x{self.input_size[1]} inputs (queries '
                f'on {self.query_hw[0]}x{self.query_hw[1]}, keys on '
                f'{self.key_hw[0]}x{self.key_hw[1]} in this stage), got '
                f'queries on {query_hw[0]}x{query_hw[1]} and keys on '
                f'{key_hw[0]}x{key_hw[1]}. Feed that input size, or use '
                "la_transform='conv', which serves any size.")
        x = F.linear(logits, self.key_weight)
        return F.linear(x.transpose(-2, -1), self.query_weight).transpose(
            -2, -1)

    def extra_repr(self) -> str:
        return f'query_hw={self.query_hw}, key_hw={self.key_hw}'


def build_attention_transform(cfg: dict, num_heads: int,
                              query_hw: Optional[Grid],
                              key_hw: Optional[Grid]) -> nn.Module:
    """``dict(type='conv', kernel_size=3)`` -> :class:`ConvAttentionTransform`;
    ``dict(type='dense', input_size=(H, W))`` ->
    :class:`DenseAttentionTransform` on the given grids."""
    cfg = dict(cfg)
    kind = cfg.pop('type')
    if kind == 'conv':
        return ConvAttentionTransform(num_heads, **cfg)
    if kind == 'dense':
        if query_hw is None:
            raise ValueError('the dense Less-Attention transform needs the '
                             'grid it is built for (grid_size)')
        return DenseAttentionTransform(query_hw, key_hw, **cfg)
    raise ValueError("the Less-Attention transform is 'conv' or 'dense', "
                     f'got {kind!r}')


# -------------------------------------------------------------------- state
@dataclasses.dataclass(frozen=True)
class LessAttentionState(AttentionState):
    """What Less-Attention layers pass on, one per forward pass.

    A VA layer keeps its logits as their factors (scaled queries, keys,
    additive bias): the layers after it read them through :meth:`scores`
    only where they need the ``N_q x N_k`` map (an LA layer), while the
    Attention Residual halves the queries before the product, so the
    largest map of a PVT-like network (stage 1) is never built.

    Args:
        logits (Tensor, optional): The last kept pre-softmax logits,
            ``(B * windows, heads, N_q, N_k)``, as an LA layer computed
            them (else see ``factors``).
        query_hw (tuple[int, int]): Their query grid.
        key_hw (tuple[int, int]): Their key grid.
        windows (int): Windows per image the logits are batched over (1
            outside windows; set by the window wrapper).
        maps (tuple): ``(logits, query_hw, key_hw, weight, form)`` of the
            LA layers of a training pass, for the Diagonality-Preserving
            loss (``form``: a key of :data:`DP_LOSS_FORMS`).
        factors (tuple, optional): A VA layer's logits, kept as ``(q *
            scale, k, bias, bias_windows)``: ``q @ k^T`` plus ``bias``
            (None, or added as :func:`_add_bias` adds it).
    """
    logits: Optional[torch.Tensor] = None
    query_hw: Optional[Grid] = None
    key_hw: Optional[Grid] = None
    windows: int = 1
    maps: tuple = ()
    factors: Optional[tuple] = None

    def replace(self, **changes) -> 'LessAttentionState':
        return dataclasses.replace(self, **changes)

    @property
    def has_scores(self) -> bool:
        """Whether a layer before kept its logits."""
        return self.logits is not None or self.factors is not None

    def scores(self) -> torch.Tensor:
        """The kept logits ``(B * windows, heads, N_q, N_k)``."""
        if self.logits is not None:
            return self.logits
        if self.factors is None:
            raise ValueError('no layer before kept its logits')
        q, k, bias, windows = self.factors
        return _add_bias(q @ k.transpose(-2, -1), bias, windows)

    def in_windows(self, windows_per_image: int) -> 'LessAttentionState':
        return self.replace(windows=windows_per_image)

    def aux_losses(self) -> dict:
        """``loss_dp``: the LA maps' weighted Diagonality-Preserving
        losses (none without maps): their mean for the bounded form, their
        sum (paper Eq. 10) for the paper's."""
        if not self.maps:
            return {}
        terms = {form: [] for form in DP_LOSS_FORMS}
        for logits, qhw, khw, weight, form in self.maps:
            terms[form].append(weight * DP_LOSS_FORMS[form](logits, qhw, khw))
        total = sum(terms['paper'])
        if terms['bounded']:
            total = total + sum(terms['bounded']) / len(terms['bounded'])
        return {'loss_dp': total}


def _state(state: Optional[AttentionState]) -> LessAttentionState:
    if state is None:
        return LessAttentionState()
    if not isinstance(state, LessAttentionState):
        raise TypeError(f'a Less-Attention layer got a {type(state).__name__}'
                        ' state from the layer before it')
    return state


def _combine_bias(B: int, *terms: Optional[torch.Tensor],
                  mask: Optional[torch.Tensor] = None):
    """Additive terms of ``(B, heads, N_q, N_k)`` logits, and how to view
    q / k / v so they broadcast: ``(heads, N, N)`` (relative position
    bias) broadcasts as is; ``(B_img, heads, N, N)`` with ``B_img < B``
    (one residual per image, in windows) and Swin's ``(nW, N, N)`` mask
    need the windows of an image in a dimension of their own.

    Returns:
        tuple: ``(bias, windows)``, ``windows`` the per-image window count
        to view ``(B, ...)`` tensors as ``(B / windows, windows, ...)``
        (None: no view needed).
    """
    terms = [t for t in terms if t is not None]
    per_image = [t for t in terms if t.dim() == 4 and t.shape[0] != B]
    windows = None
    if mask is not None:
        windows = mask.shape[0]
    elif per_image:
        windows = B // per_image[0].shape[0]
    if windows is None:
        bias = None
        for t in terms:
            bias = t if bias is None else bias + t
        return bias, None
    bias = mask[:, None] if mask is not None else None
    for t in terms:
        t = t[:, None] if t.dim() == 4 else t  # per image -> (B_img, 1, ...)
        bias = t if bias is None else bias + t
    return bias, windows


def _add_bias(logits: torch.Tensor, bias: Optional[torch.Tensor],
              windows: Optional[int]) -> torch.Tensor:
    """``logits + bias`` as :func:`_combine_bias` returned them."""
    if bias is None:
        return logits
    if windows:
        return (logits.unflatten(0, (-1, windows)) + bias).flatten(0, 1)
    return logits + bias


# ---------------------------------------------------------------- attention
@ATTENTIONS.register_module()
class VanillaAttention(SpatialReductionAttention):
    """VA layer: softmax attention (paper Eq. 4) that keeps its logits for
    the layers after it.

    PVT's spatial-reduction attention (``sr_ratio``; corner-padded, so the
    key grid is ``ceil(H / sr) x ceil(W / sr)``), with Swin's relative
    position bias when it runs in a window (``window_size``). Its logits
    get the Attention Residual of the previous stage's last logits when it
    is a stage's first layer (``residual``), and are kept in the state
    (``keep_logits``) when an LA layer or the next stage's residual reuses
    them; otherwise the fused kernel runs and the state drops older logits.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads.
        sr_ratio (int): Spatial reduction of keys and values. Default: 1.
        qkv_bias (bool): Bias in the q / kv projections. Default: True.
        keep_logits (bool | str): Keep the pre-softmax logits: True builds
            the map (for an LA layer next), 'factors' keeps ``q``, ``k``
            and the bias (for the next stage's residual only).
            Default: False.
        residual (dict, optional): The Attention Residual from the previous
            stage: ``dict(type='conv' | 'window', in_heads=..., 
            layer_scale_init=0.1)`` (:class:`AttentionResidual`,
            :class:`WindowAttentionResidual`). Default: None.
        window_size (tuple[int, int], optional): The window it runs in
            (adds a relative position bias). Default: None.
        sr_padding (int | str): See :class:`SpatialReduction`.
            Default: 'corner'.
        **kwargs: Other :class:`SpatialReductionAttention` arguments.
    """
    stateful = True

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 sr_ratio: int = 1,
                 qkv_bias: bool = True,
                 keep_logits: bool = False,
                 residual: Optional[dict] = None,
                 window_size: Optional[Grid] = None,
                 sr_padding: Union[int, str] = 'corner',
                 **kwargs):
        super().__init__(embed_dims, num_heads, sr_ratio, qkv_bias=qkv_bias,
                         sr_padding=sr_padding, **kwargs)
        self.keep_logits = keep_logits
        self.grid_free = False
        self.relative_position_bias = None if window_size is None else \
            RelativePositionBias(to_2tuple_int(window_size), num_heads)
        self.residual = None if residual is None else \
            build_attention_residual(residual, num_heads, window_size)

    def forward(self,
                x: torch.Tensor,
                hw_shape: Grid,
                state: Optional[AttentionState] = None,
                mask: Optional[torch.Tensor] = None):
        state = _state(state)
        q, k, v, kv_hw = self.project(x, hw_shape)
        rpb = None if self.relative_position_bias is None else \
            self.relative_position_bias()
        residual = None
        if self.residual is not None and state.has_scores:
            residual = self.residual(state, tuple(hw_shape))
        B = q.shape[0]
        kept = self.keep_logits
        if kept and kept != 'factors':
            # An LA layer reads the map next: build it once, here.
            kept_bias, kept_windows = _combine_bias(B, rpb, residual)
            logits = _add_bias((q * self.scale) @ k.transpose(-2, -1),
                               kept_bias, kept_windows)
            out = _masked_softmax(logits, mask).to(v.dtype) @ v
            # Kept without the shift mask: an LA layer re-adds its own.
            return self.output(out), state.replace(
                logits=logits, factors=None, query_hw=tuple(hw_shape),
                key_hw=kv_hw, windows=1)
        # Fused attention; only the next stage's residual reads the logits,
        # from their factors (it halves the queries first).
        bias, windows = _combine_bias(B, rpb, residual, mask=mask)
        qw, kw, vw = (q, k, v) if not windows else (
            t.unflatten(0, (-1, windows)) for t in (q, k, v))
        out = F.scaled_dot_product_attention(
            qw, kw, vw, attn_mask=None if bias is None else bias.to(q.dtype),
            scale=self.scale)
        out = self.output(out.flatten(0, 1) if windows else out)
        if not kept:
            return out, state.replace(logits=None, factors=None)
        return out, state.replace(
            logits=None, factors=(q * self.scale, k,
                                  *_combine_bias(B, rpb, residual)),
            query_hw=tuple(hw_shape), key_hw=kv_hw, windows=1)

    @torch.no_grad()
    def query_attention(self, x, hw_shape, index, state=None):
        """The softmax weights of query ``index`` (relative position bias
        and, given the state, the Attention Residual included)."""
        q, k, _, kv_hw = self.project(x[:1], hw_shape)
        q, k = q[0], k[0]
        logits = ((q[:, index:index + 1] * self.scale) @
                  k.transpose(-2, -1))[:, 0]
        if self.relative_position_bias is not None:
            logits = logits + self.relative_position_bias()[:, index]
        if self.residual is not None and state is not None and \
                _state(state).has_scores:
            residual = self.residual(_first_image(state), tuple(hw_shape))
            logits = logits + residual[0, :, index]
        return QueryAttention(logits.softmax(-1), kv_hw, q[:, index], k,
                              self.scale)

    def migrate_keys(self, state_dict: dict, prefix: str = '') -> None:
        _migrate_reduction_keys(state_dict, prefix)

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
        **kwargs: Other :class:`SpatialReduction` arguments.
    """
    stateful = True
    takes_mask = True

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
                 **kwargs):
        super().__init__(embed_dims, num_heads, sr_ratio,
                         sr_padding=sr_padding, **kwargs)
        if dp_loss_form not in DP_LOSS_FORMS:
            raise ValueError(f'dp_loss_form must be one of '
                             f'{sorted(DP_LOSS_FORMS)}, got {dp_loss_form!r}')
        self.grid_free = False
        self.dp_loss_weight = dp_loss_weight
        self.dp_loss_form = dp_loss_form
        self.v = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
        if isinstance(transform, dict):
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

    def map_grids(self, hw_shape: Grid) -> Tuple[Grid, Grid]:
        """Query and key grids of this layer's maps."""
        return tuple(hw_shape), grid_after_stride(hw_shape, self.sr_ratio)

    def forward(self,
                x: torch.Tensor,
                hw_shape: Grid,
                state: Optional[AttentionState] = None,
                mask: Optional[torch.Tensor] = None):
        state = _state(state)
        if not state.has_scores:
            raise ValueError(
                'LessAttention transforms the logits of the layer before '
                'it, and none were kept: build that VanillaAttention with '
                'keep_logits=True (less_attention_layers() does)')
        v_tokens, v_hw = self.reduce(x, hw_shape)
        v = split_heads(self.v(v_tokens), self.num_heads)
        logits, out = self._transform_and_attend(state.scores(),
                                                 tuple(hw_shape), v_hw, v,
                                                 mask)
        maps = state.maps
        if self.dp_loss_weight > 0 and self.training and \
                torch.is_grad_enabled():
            maps = maps + ((logits, tuple(hw_shape), v_hw,
                            self.dp_loss_weight, self.dp_loss_form), )
        return self.output(out), state.replace(
            logits=logits, factors=None, query_hw=tuple(hw_shape),
            key_hw=v_hw, windows=1, maps=maps)

    #: At inference, maps larger than this (elements) are transformed and
    #: applied in bands of query rows of about this size (8 MiB of fp32,
    #: the fastest on the CPUs we measured; see docs/lavit.md).
    band_elements = 2**21

    def _transform_and_attend(self, prev: torch.Tensor, hw: Grid,
                              v_hw: Grid, v: torch.Tensor,
                              mask: Optional[torch.Tensor]):
        """``T(prev)`` and ``softmax(T(prev)) @ v``.

        At inference, a large map goes through in bands of query-grid rows,
        each with the transform's halo of rows around it: the transform's
        intermediates and the softmax live one band at a time (in cache),
        and only the transformed map, which the next layer reads, is
        written out whole. The result is the same as in one piece.
        """
        H, W = hw
        halo = getattr(self.transform, 'halo', None)
        # Not in a traced graph either: the FLOP counter traces, and counts
        # the network's arithmetic, not the bands' halo rows.
        if (halo is None or mask is not None or torch.is_grad_enabled()
                or is_capturing() or torch.jit.is_tracing()
                or prev.numel() <= self.band_elements):
            logits = self.transform(prev, hw, v_hw)
            return logits, _masked_softmax(logits, mask).to(v.dtype) @ v
        rows = max(1, self.band_elements * H // prev.numel())
        logits = torch.empty_like(prev)
        out = v.new_empty(*prev.shape[:-1], v.shape[-1])
        for top in range(0, H, rows):
            bottom = min(H, top + rows)
            start, stop = max(0, top - halo), min(H, bottom + halo)
            band = self.transform(prev[:, :, start * W:stop * W],
                                  (stop - start, W), v_hw)
            band = band[:, :, (top - start) * W:(bottom - start) * W]
            logits[:, :, top * W:bottom * W] = band
            out[:, :, top * W:bottom * W] = band.softmax(-1).to(v.dtype) @ v
        return logits, out

    @torch.no_grad()
    def query_attention(self, x, hw_shape, index, state=None):
        """The softmax weights of query ``index``: a row of the transformed
        logits of ``state`` (the previous layer's); the keys are the
        values' tokens."""
        if state is None or not _state(state).has_scores:
            raise ValueError('an LA layer draws from the logits of the layer '
                             'before it: give its state')
        state = _first_image(state)
        v_tokens, v_hw = self.reduce(x[:1], hw_shape)
        logits = self.transform(state.scores(), tuple(hw_shape), v_hw)
        v = split_heads(self.v(v_tokens), self.num_heads)[0]
        return QueryAttention(logits[0, :, index].softmax(-1), v_hw,
                              v.new_zeros(v.shape[0], v.shape[-1]), v,
                              self.head_dims**-0.5)

    def migrate_keys(self, state_dict: dict, prefix: str = '') -> None:
        _migrate_reduction_keys(state_dict, prefix)

    def extra_repr(self) -> str:
        return (f'{super().extra_repr()}, '
                f'dp_loss_weight={self.dp_loss_weight}')


def _masked_softmax(logits: torch.Tensor,
                    mask: Optional[torch.Tensor]) -> torch.Tensor:
    """Softmax of ``(B*nW, heads, N, N)`` logits with Swin's shift mask
    ``(nW, N, N)`` added to every image's windows."""
    if mask is not None:
        logits = (logits.unflatten(0, (-1, mask.shape[0])) +
                  mask[:, None]).flatten(0, 1)
    return logits.softmax(dim=-1)


def _migrate_reduction_keys(state_dict: dict, prefix: str) -> None:
    """0.2's reduction as an mmcv ``PatchEmbed`` (``sr.projection``,
    ``sr.norm``) -> PVT's ``sr``, ``norm``."""
    for key in [k for k in state_dict if k.startswith(prefix + 'sr.')]:
        rest = key[len(prefix) + 3:]
        if rest.startswith('projection.'):
            state_dict[prefix + 'sr.' + rest[11:]] = state_dict.pop(key)
        elif rest.startswith('norm.'):
            state_dict[prefix + 'norm.' + rest[5:]] = state_dict.pop(key)


def _per_query(factors: Optional[tuple]) -> bool:
    """Whether kept factors have one row per query in every term (their
    bias is none or ``(B | 1, heads, N_q, N_k)``), so the residual can
    halve them before their product."""
    if factors is None:
        return False
    q, _, bias, windows = factors
    return not windows and (bias is None or bias.dim() == 4
                            and bias.shape[0] in (1, q.shape[0]))


def _first_image(state: AttentionState) -> LessAttentionState:
    """The state of the first image of a batch."""
    state = _state(state)
    return state.replace(logits=state.scores()[:state.windows], factors=None)


# ------------------------------------------------------- attention residual
class AttentionResidual(BaseModule):
    """The previous stage's last attention logits, brought to this stage
    (paper Eq. 6-7): ``LS(Conv1x1(Norm(DWConv(A))))``.

    Keys stay on their grid (the same in every stage); each key's column of
    logits is an image on the previous stage's query grid: a depthwise 2x2
    stride-2 conv (corner-padded for odd grids, like the patch embedding)
    halves it onto this stage's query grid, GroupNorm normalises it, a 1x1
    conv maps the previous stage's heads to this stage's, and a per-head
    LayerScale weighs the result that is added to the first VA layer's
    logits. The downsampling starts as 2x2 averaging.

    No biases and no affine norm: per-head constants shift whole softmax
    rows, and a per-head scale before the 1x1 conv is redundant with it.

    Args:
        in_heads (int): Heads of the previous stage.
        out_heads (int): Heads of this stage.
        layer_scale_init (float): Initial LayerScale. Default: 0.1.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """
    #: Whether the previous stage's query grid is halved (a 2x2 conv).
    halves_queries = True

    def __init__(self,
                 in_heads: int,
                 out_heads: int,
                 layer_scale_init: float = 0.1,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        if self.halves_queries:
            self.downsample = nn.Conv2d(in_heads, in_heads, 2, stride=2,
                                        groups=in_heads, bias=False)
            nn.init.constant_(self.downsample.weight, 0.25)
        self.norm = nn.GroupNorm(1, in_heads, affine=False)
        self.head_proj = nn.Conv2d(in_heads, out_heads, 1, bias=False)
        self.layer_scale = LayerScale(
            out_heads, layer_scale_init, data_format='channels_first')

    def forward(self, state: LessAttentionState,
                dst_hw: Grid) -> torch.Tensor:
        """``(B, h_in, N_src, N_k)`` logits -> ``(B, h_out, N_dst, N_k)``.

        The maps stay in their ``(B, heads, queries, keys)`` layout (no
        per-key images are cut out of them). The downsampling is linear
        along the queries, so for logits kept as factors it halves the
        queries before their product with the keys: ``DWConv(q k^T) =
        DWConv(q) k^T``, a quarter of the map, which the previous stage's
        full map never has to exist for.
        """
        src_hw = state.query_hw
        if tuple(grid_after_stride(src_hw, 2)) != tuple(dst_hw):
            raise ValueError(f'attention residual maps a {src_hw} query grid '
                             f'to {grid_after_stride(src_hw, 2)}, not '
                             f'{tuple(dst_hw)}')
        if state.logits is None and _per_query(state.factors):
            q, k, bias, _ = state.factors
            x = self._halve_queries(q, src_hw) @ k.transpose(-2, -1)
            if bias is not None:
                x = x + self._halve_queries(bias, src_hw)
        else:
            x = self._halve_queries(state.scores(), src_hw)
        # GroupNorm(1, h_in) of every key's column: over heads and queries.
        var, mean = torch.var_mean(x, dim=(1, 2), unbiased=False,
                                   keepdim=True)
        x = (x - mean) * torch.rsqrt(var + self.norm.eps)
        # (B, heads, queries, keys) is NCHW with the heads as channels.
        return self.layer_scale(self.head_proj(x))

    def _halve_queries(self, x: torch.Tensor, src_hw: Grid) -> torch.Tensor:
        """The depthwise 2x2 stride-2 conv over the query grid of ``(B, h,
        N_src, D)``, corner-padded: ``(B, h, N_dst, D)``."""
        B, h, _, D = x.shape
        x = F.pad(x.reshape(B, h, *src_hw, D),
                  (0, 0, 0, src_hw[1] % 2, 0, src_hw[0] % 2))
        taps = self.downsample.weight[:, 0, :, :, None, None, None]
        out = sum(taps[:, i, j] * x[:, :, i::2, j::2] for i in (0, 1)
                  for j in (0, 1))
        return out.flatten(2, 3)


class WindowAttentionResidual(AttentionResidual):
    """The Attention Residual between Swin stages.

    Swin's windows keep their size, not their tokens: a window of the next
    stage covers 2x2 windows of this one, with the 7-token sides straddling
    them, so most of its token pairs were never scored. What carries over is
    the pattern within a window: the previous stage's last logits averaged
    over an image's windows ``(B, h_in, N, N)``, normalised, mapped to this
    stage's heads by a 1x1 conv and weighed by a per-head LayerScale; the
    first VA layer adds it to every window (an input-dependent analogue of
    the relative position bias).

    Args:
        in_heads (int): Heads of the previous stage.
        out_heads (int): Heads of this stage.
        layer_scale_init (float): Initial LayerScale. Default: 0.1.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """
    halves_queries = False  # the window keeps its size between stages

    def forward(self, state: LessAttentionState,
                dst_hw: Grid) -> torch.Tensor:
        """``(B*nW_src, h_in, N, N)`` -> ``(B, h_out, N, N)``."""
        logits = state.scores()
        _, h, N, _ = logits.shape
        x = logits.view(-1, state.windows, h, N, N).mean(dim=1)
        return self.layer_scale(self.head_proj(self.norm(x)))


def build_attention_residual(cfg: dict, num_heads: int,
                             window_size: Optional[Grid]) -> nn.Module:
    """``dict(type='conv' | 'window', in_heads=..., layer_scale_init=...)``
    -> :class:`AttentionResidual` / :class:`WindowAttentionResidual` into
    ``num_heads`` heads."""
    cfg = dict(cfg)
    kind = cfg.pop('type', 'window' if window_size else 'conv')
    if kind == 'conv':
        return AttentionResidual(out_heads=num_heads, **cfg)
    if kind == 'window':
        return WindowAttentionResidual(out_heads=num_heads, **cfg)
    raise ValueError("the attention residual is 'conv' or 'window', got "
                     f'{kind!r}')


# ------------------------------------------------------------------- loss
def diagonality_preserving_loss(logits: torch.Tensor, query_hw: Grid,
                                key_hw: Grid) -> torch.Tensor:
    """Diagonality-Preserving loss of one attention map (paper Eq. 8-9).

    Eq. 9 as printed sums raw logits and rewards a *smaller* diagonal; we
    keep its intent, a symmetric map whose diagonal dominates each row, in a
    bounded form that does not depend on the resolution:

    * ``P = softmax(logits)`` in fp32; with ``N_q != N_k`` the queries are
      average-pooled onto the key grid, giving an ``N_k x N_k`` map whose
      rows still sum to 1 (row i: the attention of the queries in key cell
      i);
    * symmetry: ``mean_i sum_j |P_ij - P_ji| / 2`` (in [0, 1]);
    * diagonality: ``mean_i relu(max_{j != i} P_ij - P_ii) / max_j P_ij``
      (in [0, 1]; 0 when every diagonal entry is its row's maximum).

    Means over rows, heads and images, never sums, so the value does not
    grow with the number of tokens.

    Args:
        logits (Tensor): Pre-softmax attention ``(B, heads, N_q, N_k)``.
        query_hw (tuple[int, int]): Query grid (``N_q`` tokens).
        key_hw (tuple[int, int]): Key grid (``N_k`` tokens).

    Returns:
        Tensor: fp32 scalar, symmetry + diagonality terms.
    """
    B, h, Nq, Nk = logits.shape
    with torch.autocast(logits.device.type, enabled=False):
        probs = logits.float().softmax(dim=-1)
        if tuple(query_hw) != tuple(key_hw):
            columns = probs.transpose(-2, -1).reshape(B * h, Nk, *query_hw)
            probs = F.adaptive_avg_pool2d(columns, key_hw).reshape(
                B, h, Nk, Nk).transpose(-2, -1)
        asymmetry = (probs - probs.transpose(-2, -1)).abs().sum(-1).mean() / 2
        diag = probs.diagonal(dim1=-2, dim2=-1)
        off_diag = probs.masked_fill(
            torch.eye(Nk, dtype=torch.bool, device=probs.device), 0)
        excess = (off_diag.amax(dim=-1) - diag).clamp_min(0)
        dominance = (excess / probs.amax(dim=-1)).mean()
    return asymmetry + dominance


def paper_diagonality_loss(logits: torch.Tensor, query_hw: Grid,
                           key_hw: Grid) -> torch.Tensor:
    """Diagonality-Preserving loss of one map as the paper prints it
    (Eq. 9), for reproducing the paper as written.

    On the pre-softmax map ``A``: ``sum_ij |A_ij - A_ji| + sum_i ((N - 1)
    A_ii - sum_{j != i} A_ij)``, summed over the heads and averaged over the
    images. It is unbounded below (growing the off-diagonal logits lowers
    it without limit) and grows with the number of tokens; docs/lavit.md
    measures what that does to training. With ``N_q != N_k`` the queries
    are average-pooled onto the key grid first, as in
    :func:`diagonality_preserving_loss`.

    Args:
        logits (Tensor): Pre-softmax attention ``(B, heads, N_q, N_k)``.
        query_hw (tuple[int, int]): Query grid (``N_q`` tokens).
        key_hw (tuple[int, int]): Key grid (``N_k`` tokens).

    Returns:
        Tensor: fp32 scalar.
    """
    B, h, Nq, Nk = logits.shape
    with torch.autocast(logits.device.type, enabled=False):
        A = logits.float()
        if tuple(query_hw) != tuple(key_hw):
            columns = A.transpose(-2, -1).reshape(B * h, Nk, *query_hw)
            A = F.adaptive_avg_pool2d(columns, key_hw).reshape(
                B, h, Nk, Nk).transpose(-2, -1)
        symmetry = (A - A.transpose(-2, -1)).abs().sum((-2, -1))
        diag = A.diagonal(dim1=-2, dim2=-1)
        off_diag = A.sum(-1) - diag
        diagonality = ((Nk - 1) * diag - off_diag).sum(-1)
    return (symmetry + diagonality).sum(1).mean()


#: ``dp_loss_form`` -> the loss of one LA map.
DP_LOSS_FORMS = {
    'bounded': diagonality_preserving_loss,
    'paper': paper_diagonality_loss,
}


# ---------------------------------------------------------------- backbones
def less_attention_layers(depths: Sequence[int],
                          la_start: Sequence[int],
                          vanilla: Union[dict, Sequence[Sequence[dict]]],
                          less: Union[dict, Sequence[Sequence[dict]]],
                          residual: Optional[Sequence[Optional[dict]]] = None
                          ) -> List[List[dict]]:
    """The attention config of every block of a Less-Attention backbone.

    Per stage, VA layers (``vanilla``) up to the first LA layer
    ``la_start`` (1-based; 0: none), then LA layers (``less``); each may be
    one dict or, per stage, a list with one per block (e.g. window configs
    whose inner attention is a VA / LA layer: their keys go to it). A VA
    layer keeps its logits when an LA layer or the next stage's Attention
    Residual reuses them; the first VA layer of stage ``i`` gets
    ``residual[i]`` (None: none).
    """
    num_stages = len(depths)
    residual = list(residual or [None] * num_stages)
    for i, start in enumerate(la_start):
        if start != 0 and not 2 <= start <= depths[i]:
            raise ValueError(
                f'la_start[{i}] = {start}: the first LA layer of a stage is '
                f'layer 2..{depths[i]} (1-based), or 0 for none')
    cfgs = []
    for i, (depth, start) in enumerate(zip(depths, la_start)):
        va = [vanilla] * depth if isinstance(vanilla, dict) else vanilla[i]
        la = [less] * depth if isinstance(less, dict) else less[i]
        layers = []
        for j in range(depth):
            if start and j + 1 >= start:
                layers.append(dict(la[j]))
                continue
            next_is_la = bool(start) and j + 2 >= start and j + 1 < depth
            feeds_residual = (j + 1 == depth and i + 1 < num_stages
                              and residual[i + 1] is not None)
            reads_windows = feeds_residual and \
                residual[i + 1].get('type') == 'window'
            if next_is_la or reads_windows:
                keep = True  # the next reader takes the whole map
            elif feeds_residual:
                keep = 'factors'  # the conv residual halves the queries
            else:
                keep = False
            layer = dict(va[j], keep_logits=keep)
            if j == 0 and residual[i] is not None:
                layer['residual'] = dict(residual[i])
            layers.append(layer)
        cfgs.append(layers)
    return cfgs


def _less_attention(la_transform: str, la_kernel_size: int,
                    input_size, dp_loss_weight: float,
                    dp_loss_form: str = 'bounded', **kwargs) -> dict:
    """The LA layer config of a backbone's ``la_transform`` /
    ``la_kernel_size`` / ``dp_loss_weight`` / ``dp_loss_form``
    arguments."""
    if la_transform == 'conv':
        transform = dict(type='conv', kernel_size=la_kernel_size)
    elif la_transform == 'dense':
        transform = dict(type='dense', input_size=to_2tuple_int(input_size))
    else:
        raise ValueError("la_transform must be 'conv' or 'dense', got "
                         f'{la_transform!r}')
    return dict(type='LessAttention', transform=transform,
                dp_loss_weight=dp_loss_weight, dp_loss_form=dp_loss_form,
                **kwargs)


@register_model
class LaViT(AttnPVT):
    """LaViT backbone: PVT with Less-Attention layers (paper Table 1).

    :class:`AttnPVT` whose blocks are VA (:class:`VanillaAttention`) and LA
    (:class:`LessAttention`) layers, with an :class:`AttentionResidual` in
    the first layer of every stage but the first and the
    Diagonality-Preserving loss over the LA maps. With
    ``less_attention=False, attn_residual=False`` it is PVT (the paper's
    Table 6 baseline); LaViT-T / S are Table 5's PVT+LA.

    ``la_start`` is the paper's N_LA read as the 1-based index of the first
    LA layer of each stage, 0 meaning none: T ``[0, 0, 2, 2]`` has one LA
    layer in each of stages 3 and 4, S ``[0, 0, 3, 2]`` four and two, B
    ``[0, 2, 4, 3]`` two, fifteen and one (the paper's Table 7 numbers
    layers this way; the reading reproduces the S and B classification
    parameter counts).

    Args:
        arch (str | dict): 'tiny', 'small', 'base' (or 't', 's', 'b'), or a
            dict with ``embed_dims``, ``depths``, ``num_heads``,
            ``mlp_ratios`` and ``la_start`` (one per stage).
            Default: 'tiny'.
        pretrain_img_size (int | tuple[int, int]): Input size the weights
            were trained on: sizes the position embeddings (resized to the
            running grid at other sizes) and the dense transform.
            Default: 224.
        sr_ratios (Sequence[int]): Spatial reduction of keys / values per
            stage. With the Attention Residual each must halve the previous
            one (the key grid stays the same). Default: (8, 4, 2, 1).
        less_attention (bool): Build LA layers; False puts vanilla attention
            in their place (the same network without Less-Attention, e.g.
            to measure what it saves). Default: True.
        la_transform (str): 'conv' (any input size) or 'dense' (the paper's
            N x N maps, only at ``pretrain_img_size``). Default: 'conv'.
        la_kernel_size (int): Kernel of the 'conv' transform. Default: 3.
        attn_residual (bool): Attention Residual between stages.
            Default: True.
        ar_layer_scale_init (float): Initial LayerScale of the residual.
            Default: 0.1.
        dp_loss_weight (float): Weight of the Diagonality-Preserving loss
            (mean over LA layers), returned as ``loss_dp`` by
            ``pop_aux_losses()`` after a training forward pass; 0 disables
            it. Default: 0.1.
        dp_loss_form (str): 'bounded' (ours) or 'paper' (Eq. 9-10 as
            printed: summed over LA layers, unbounded; use with
            ``dp_loss_weight=1.`` to reproduce the paper as written).
            Default: 'bounded'.
        paddings (Sequence[int | str]): Patch embedding paddings; 'corner'
            keeps the key grid the same in every stage. Default: 'corner'
            in every stage.
        out_norm (bool): A LayerNorm per output. Default: True.
        patch_norm_cfg (dict): Norm of the patch embeddings.
            Default: ``dict(type='LN')``.
        **kwargs: The other :class:`AttnPVT` arguments (mmdet's
            ``num_layers``, ``embed_dims`` ..., ``drop_path_rate``,
            ``out_indices``, ``norm_cfg``, ``with_cp``, ``frozen_stages``,
            ``init_cfg``).
    """
    arch_zoo = {
        ('t', 'tiny'): dict(depths=[2, 2, 2, 2], la_start=[0, 0, 2, 2],
                            **PVT_WIDTHS),
        ('s', 'small'): dict(depths=[3, 4, 6, 3], la_start=[0, 0, 3, 2],
                             **PVT_WIDTHS),
        ('b', 'base'): dict(depths=[3, 3, 18, 3], la_start=[0, 2, 4, 3],
                            **PVT_WIDTHS),
    }
    arch_keys = ('embed_dims', 'depths', 'num_heads', 'mlp_ratios',
                 'la_start')

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 pretrain_img_size: Union[int, Tuple[int, int]] = 224,
                 sr_ratios: Sequence[int] = (8, 4, 2, 1),
                 less_attention: bool = True,
                 la_transform: str = 'conv',
                 la_kernel_size: int = 3,
                 attn_residual: bool = True,
                 ar_layer_scale_init: float = 0.1,
                 dp_loss_weight: float = 0.1,
                 dp_loss_form: str = 'bounded',
                 paddings: Sequence[Union[int, str]] = ('corner', ) * 4,
                 out_norm: bool = True,
                 patch_norm_cfg: dict = dict(type='LN'),
                 **kwargs):
        if 'attn_cfgs' in kwargs:
            raise TypeError(f'{type(self).__name__} builds its own '
                            'attn_cfgs from la_start')
        settings = self.resolve_arch(
            arch, *(kwargs.pop(k, None) for k in ('embed_dims', 'num_layers',
                                                  'num_heads', 'mlp_ratios')))
        depths, num_heads = settings['depths'], settings['num_heads']
        num_stages = len(depths)
        if len(sr_ratios) != num_stages:
            raise ValueError('sr_ratios needs one entry per stage')
        if attn_residual and any(sr_ratios[i - 1] != 2 * sr_ratios[i]
                                 for i in range(1, num_stages)):
            raise ValueError(
                'the attention residual needs the same key grid in every '
                'stage: each sr_ratio must halve the previous one, e.g. '
                f'(8, 4, 2, 1); got {tuple(sr_ratios)}')
        residual = [None] + [
            dict(type='conv', in_heads=num_heads[i - 1],
                 layer_scale_init=ar_layer_scale_init)
            for i in range(1, num_stages)
        ] if attn_residual else None
        attn_cfgs = less_attention_layers(
            depths,
            settings['la_start'] if less_attention else [0] * num_stages,
            vanilla=dict(type='VanillaAttention'),
            less=_less_attention(la_transform, la_kernel_size,
                                 pretrain_img_size, dp_loss_weight,
                                 dp_loss_form),
            residual=residual)
        super().__init__(
            arch=settings,
            attn_cfgs=attn_cfgs,
            pretrain_img_size=pretrain_img_size,
            sr_ratios=sr_ratios,
            paddings=paddings,
            out_norm=out_norm,
            patch_norm_cfg=patch_norm_cfg,
            **kwargs)
        self.dp_loss_weight = dp_loss_weight
        self.dp_loss_form = dp_loss_form

    def migrate_keys(self, state_dict: dict, prefix: str = '') -> None:
        """0.2's stage-level residual (``stages.{i}.attn_residual``) ->
        the first layer's (``stages.{i}.blocks.0.attn.residual``), then
        :meth:`AttnPVT.migrate_keys`."""
        _move_residual(state_dict, prefix, 'blocks.0.attn.residual.')
        super().migrate_keys(state_dict, prefix)


def _move_residual(state_dict: dict, prefix: str, target: str) -> None:
    old = f'{prefix}stages.'
    for key in [k for k in state_dict if k.startswith(old)]:
        stage, _, rest = key[len(old):].partition('.')
        if rest.startswith('attn_residual.'):
            state_dict[f'{old}{stage}.{target}'
                       f'{rest[len("attn_residual."):]}'] = \
                state_dict.pop(key)


@register_model
class LessAttnViT(AttnViT):
    """Less-Attention plug-in for plain ViTs (LaViT Table 5: ViT+LA,
    DeiT+LA): the :class:`AttnViT` skeleton whose first ``la_start - 1``
    blocks are VA layers (:class:`VanillaAttention`, plain multi-head
    self-attention) and the rest LA layers (:class:`LessAttention`).

    A plain ViT has one stage, so there is no Attention Residual. DeiT+LA is
    the default DeiT layout without class token (conv patches, learned
    positions, the mean token for classification); ViT+LA the Simple-ViT
    one (``patch_embed='pixel_norm', pos_embed='sincos'``).

    Args:
        arch (str | dict): 'tiny', 'small' (or 't', 's', 'deit-tiny',
            'deit-small' ...), or a dict with ``embed_dims``, ``depth``,
            ``num_heads`` and optionally ``la_start``. Default: 'tiny'.
        la_start (int, optional): 1-based index of the first LA block (0:
            none); overrides the arch's. Default: None.
        less_attention (bool): Build LA layers; False gives the same ViT
            with vanilla attention throughout (the Table 5 base).
            Default: True.
        la_transform (str): 'conv' (any input size) or 'dense' (the paper's
            N x N maps, only at ``pretrain_img_size``). Default: 'conv'.
        la_kernel_size (int): Kernel of the 'conv' transform. Default: 3.
        dp_loss_weight (float): Weight of the Diagonality-Preserving loss
            (``loss_dp``). Default: 0.1.
        dp_loss_form (str): 'bounded' (ours) or 'paper' (Eq. 9-10 as
            printed). Default: 'bounded'.
        pretrain_img_size (int | tuple[int, int]): Sizes the learned
            position embedding and the dense transform (``img_size``).
            Default: 224.
        **kwargs: The other :class:`AttnViT` arguments (``patch_embed``,
            ``pos_embed``, ``out_indices``, ``out_type``,
            ``drop_path_rate``, ``with_cp``, ``frozen_stages``,
            ``init_cfg``, ...). Defaults: no class token, no final norm, a
            norm per output (``norm{i}``), LayerNorm eps 1e-5, bilinear
            position resizing.
    """
    arch_zoo = {
        ('t', 'tiny', 'ti', 'deit-t', 'deit-tiny'):
        dict(embed_dims=192, depth=12, num_heads=3, la_start=4),
        ('s', 'small', 'deit-s', 'deit-small'):
        dict(embed_dims=384, depth=12, num_heads=6, la_start=4),
    }
    scope_defaults = NO_CLS_TOKEN_SCOPE_DEFAULTS

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 la_start: Optional[int] = None,
                 less_attention: bool = True,
                 la_transform: str = 'conv',
                 la_kernel_size: int = 3,
                 dp_loss_weight: float = 0.1,
                 dp_loss_form: str = 'bounded',
                 pretrain_img_size: Union[int, Tuple[int, int]] = 224,
                 **kwargs):
        if 'attn_cfgs' in kwargs:
            raise TypeError(f'{type(self).__name__} builds its own '
                            'attn_cfgs from la_start')
        pretrain_img_size = kwargs.pop('img_size', pretrain_img_size)
        settings = self.resolve_arch(
            arch, *(kwargs.pop(k, None)
                    for k in ('embed_dims', 'num_layers', 'num_heads')))
        la_start = settings.pop('la_start', None) if la_start is None \
            else la_start
        if la_start is None:
            raise ValueError('give la_start (the first LA block, 1-based) '
                             'with a custom arch')
        layers, = less_attention_layers(
            [settings['depth']], [la_start if less_attention else 0],
            vanilla=dict(type='VanillaAttention'),
            less=_less_attention(la_transform, la_kernel_size,
                                 pretrain_img_size, dp_loss_weight,
                                 dp_loss_form))
        for key, value in dict(with_cls_token=False, final_norm=False,
                               out_norm=True, norm_cfg=dict(type='LN'),
                               patch_bias=True,
                               interpolate_mode='bilinear').items():
            kwargs.setdefault(key, value)
        super().__init__(
            arch=settings,
            attn_cfgs=[[layer] for layer in layers],
            img_size=pretrain_img_size,
            **kwargs)
        self.dp_loss_weight = dp_loss_weight
        self.dp_loss_form = dp_loss_form


@register_model
class LessAttnSwinTransformer(AttnSwinTransformer):
    """Less-Attention plug-in for Swin (LaViT Table 5: Swin+LA): the
    :class:`AttnSwinTransformer` skeleton whose blocks are VA layers in
    Swin's windows (:class:`VanillaAttention` with the relative position
    bias, Swin's shift alternation) up to ``la_start`` in each stage, then
    window LA layers, with a :class:`WindowAttentionResidual` in the first
    layer of every stage but the first and the Diagonality-Preserving loss
    over the LA maps.

    Shifted windows: an LA layer works in the windows of the logits it
    transforms, so every LA layer of a stage takes the shift of the stage's
    last VA layer and Swin's alternation continues in the VA layers only
    (``docs/lavit.md`` gives the reasons).

    Args:
        arch (str | dict): 'tiny', 'small' (or 't', 's'), or a dict with
            ``embed_dims``, ``depths``, ``num_heads`` and optionally
            ``la_start`` (one per stage). Default: 'tiny'.
        la_start (Sequence[int], optional): Per stage, the 1-based index of
            the first LA layer (0: none); overrides the arch's.
            Default: None.
        less_attention (bool): Build LA layers; False gives Swin with the
            same window attention throughout (the Table 5 base).
            Default: True.
        la_transform (str): 'conv' (banded maps, as LaViT's) or 'dense'
            (the paper's N x N maps over a window's tokens, which windows
            allow at any input size, at about 3x the transform cost).
            Default: 'conv'.
        la_kernel_size (int): Kernel of the 'conv' transform. Default: 3.
        attn_residual (bool): Attention Residual between stages.
            Default: True.
        ar_layer_scale_init (float): Initial LayerScale of the residual.
            Default: 0.1.
        dp_loss_weight (float): Weight of the Diagonality-Preserving loss
            (``loss_dp``). Default: 0.1.
        dp_loss_form (str): 'bounded' (ours) or 'paper' (Eq. 9-10 as
            printed). Default: 'bounded'.
        window_size (int): Window side. Default: 7.
        **kwargs: The other :class:`AttnSwinTransformer` arguments
            (``out_indices``, ``drop_path_rate``, ``with_cp``,
            ``frozen_stages``, ``init_cfg``, mmdet's keyword names, ...).
    """
    arch_zoo = {
        ('t', 'tiny'): dict(embed_dims=96, depths=[2, 2, 6, 2],
                            num_heads=[3, 6, 12, 24], la_start=[2, 2, 2, 2]),
        ('s', 'small'): dict(embed_dims=96, depths=[2, 2, 18, 2],
                             num_heads=[3, 6, 12, 24],
                             la_start=[0, 0, 4, 0]),
    }

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 la_start: Optional[Sequence[int]] = None,
                 less_attention: bool = True,
                 la_transform: str = 'conv',
                 la_kernel_size: int = 3,
                 attn_residual: bool = True,
                 ar_layer_scale_init: float = 0.1,
                 dp_loss_weight: float = 0.1,
                 dp_loss_form: str = 'bounded',
                 window_size: int = 7,
                 **kwargs):
        if 'attn_cfgs' in kwargs:
            raise TypeError(f'{type(self).__name__} builds its own '
                            'attn_cfgs from la_start')
        settings = self.parse_arch(arch)
        la_start = settings.pop('la_start', None) if la_start is None \
            else list(la_start)
        settings = self.resolve_arch(settings, kwargs.pop('embed_dims', None),
                                     kwargs.pop('depths', None),
                                     kwargs.pop('num_heads', None))
        depths, num_heads = settings['depths'], settings['num_heads']
        if la_start is None or len(la_start) != len(depths):
            raise ValueError(f'la_start needs one entry per stage '
                             f'({len(depths)}), got {la_start}')
        if not less_attention:
            la_start = [0] * len(depths)
        window = dict(type='WindowedAttention', window_size=window_size)
        vanilla = [[
            dict(window, window_msa='VanillaAttention', shift=j % 2 == 1)
            for j in range(depth)
        ] for depth in depths]
        less = _less_attention(la_transform, la_kernel_size, window_size,
                               dp_loss_weight, dp_loss_form)
        less = dict(window, window_msa=less.pop('type'), **less)
        residual = [None] + [
            dict(type='window', in_heads=num_heads[i - 1],
                 layer_scale_init=ar_layer_scale_init)
            for i in range(1, len(depths))
        ] if attn_residual else None
        layers = less_attention_layers(depths, la_start, vanilla=vanilla,
                                       less=less, residual=residual)
        for stage, start in zip(layers, la_start):
            if start:  # LA layers keep the windows of the last VA layer
                for cfg in stage[start - 1:]:
                    cfg['shift'] = stage[start - 2]['shift']
        super().__init__(
            arch=settings, attn_cfgs=layers, window_size=window_size,
            **kwargs)
        self.dp_loss_weight = dp_loss_weight
        self.dp_loss_form = dp_loss_form

    def migrate_keys(self, state_dict: dict, prefix: str = '') -> None:
        """0.2's stage-level residual -> the first layer's, then
        :meth:`AttnSwinTransformer.migrate_keys`."""
        _move_residual(state_dict, prefix, 'blocks.0.attn.w_msa.residual.')
        super().migrate_keys(state_dict, prefix)
