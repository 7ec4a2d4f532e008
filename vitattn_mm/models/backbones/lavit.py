"""LaViT: Less-Attention Vision Transformer, on a PVT base, at any input size.

Zhang et al., "You Only Need Less Attention at Each Stage in Vision
Transformers", CVPR 2024 (https://arxiv.org/abs/2406.00427). No official
code exists; this is our reading of the paper, made to serve dense
prediction (see ``docs/lavit.md`` for every decision and deviation).

Each stage of a PVT (patch embedding, absolute position embedding, blocks
with spatial-reduction attention) starts with Vanilla Attention (VA) layers
and continues with Less-Attention (LA) layers, which compute no ``Q K^T``:
they transform the previous layer's pre-softmax attention logits and apply
their softmax to their own values (paper Eq. 5). The Attention Residual
(Eq. 6-7) carries the previous stage's last logits into the first layer of
the next, and the Diagonality-Preserving loss (Eq. 9, in a bounded,
resolution-independent form) keeps the transformed maps attention-like.

Shapes: the attention logits of a stage are ``(B, heads, N_q, N_k)``: queries
on the stage grid, keys on the spatially reduced grid. With the spatial
reductions 8, 4, 2, 1 every stage has the same key grid (ceil(H/32) x
ceil(W/32); the reductions pad like the patch embeddings), so only the query
grid changes between stages.
"""
import math
from typing import List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn.bricks.transformer import PatchEmbed
from mmdet.models.layers import nlc_to_nchw
from mmengine.model import BaseModule
from mmpretrain.models.utils import LayerScale

from ...registry import ATTENTIONS, register_model
from ..aux_loss import AuxLossBackbone
from ..layers import (RelativePositionBias, check_heads, crop_tokens,
                      grid_after_stride, is_capturing, pad_to_multiple,
                      shifted_window_mask, split_heads, to_2tuple_int,
                      window_partition, window_reverse)
from .pvt import PVT_WIDTHS, AttnPVT
from .swin import AttnSwinTransformer
from .vit import AttnViT

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
        # Every row (then column) of scores becomes one channel of a single
        # depthwise conv with the row's head kernel: on CPUs this is several
        # times faster than a batch of N tiny h-channel images. The key
        # conv runs channels-last, which leaves its output key-major, the
        # layout the query conv and the per-key head mixing read directly.
        B, h, Nq, Nk = logits.shape
        if is_capturing():
            return self._forward_batched(logits, query_hw, key_hw)
        pad = self.key_conv.padding
        rows = B * h * Nq
        x = logits.reshape(1, rows, *key_hw).contiguous(
            memory_format=torch.channels_last)
        x = F.conv2d(x, self.key_conv.weight.repeat_interleave(Nq, 0)
                     .repeat(B, 1, 1, 1), padding=pad, groups=rows)
        x = x.permute(0, 2, 3, 1).reshape(1, Nk * B * h, *query_hw)
        x = F.conv2d(x, self.query_conv.weight.repeat(Nk * B, 1, 1, 1),
                     padding=pad, groups=Nk * B * h)
        x = F.conv2d(x, self.head_mix.weight.repeat(Nk * B, 1, 1, 1),
                     groups=Nk * B)
        return x.reshape(Nk, B, h, Nq).permute(1, 2, 3, 0)

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


def transform_cfg(la_transform: str, la_kernel_size: int,
                  input_size: Grid) -> dict:
    """A backbone's ``la_transform`` / ``la_kernel_size`` arguments as the
    ``transform`` config of its :class:`LessAttention` layers."""
    if la_transform == 'conv':
        return dict(type='conv', kernel_size=la_kernel_size)
    if la_transform == 'dense':
        return dict(type='dense', input_size=to_2tuple_int(input_size))
    raise ValueError("la_transform must be 'conv' or 'dense', got "
                     f'{la_transform!r}')


# ---------------------------------------------------------------- attention
class SpatialReductionAttention(BaseModule):
    """What VA and LA layers share: PVT's spatial reduction (keys and values
    from a strided conv + LayerNorm of the map, corner-padded so the key grid
    is ``ceil(H / sr) x ceil(W / sr)``), head split / merge and the output
    projection."""

    def __init__(self, embed_dims: int, num_heads: int, sr_ratio: int = 1):
        super().__init__()
        check_heads(embed_dims, num_heads)
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.sr_ratio = sr_ratio
        if sr_ratio > 1:
            self.sr = PatchEmbed(
                embed_dims,
                embed_dims,
                kernel_size=sr_ratio,
                stride=sr_ratio,
                padding='corner',
                norm_cfg=dict(type='LN'))
        self.proj = nn.Linear(embed_dims, embed_dims)

    def reduce(self, x: torch.Tensor, hw_shape: Grid):
        """Tokens the keys / values come from, and their grid."""
        if self.sr_ratio == 1:
            return x, tuple(hw_shape)
        return self.sr(nlc_to_nchw(x, hw_shape))

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        return split_heads(x, self.num_heads)

    def output(self, out: torch.Tensor) -> torch.Tensor:
        """Merge the heads of ``(B, heads, N, C / heads)``, project."""
        B, _, N, _ = out.shape
        return self.proj(out.transpose(1, 2).reshape(B, N, self.embed_dims))

    def extra_repr(self) -> str:
        return (f'embed_dims={self.embed_dims}, num_heads={self.num_heads}, '
                f'sr_ratio={self.sr_ratio}')


@ATTENTIONS.register_module()
class VanillaAttention(SpatialReductionAttention):
    """VA layer: PVT's spatial-reduction attention (paper Eq. 4).

    ``forward(x, hw_shape, bias)`` adds ``bias`` (the Attention Residual) to
    the logits. With ``keep_logits`` the logits are materialised and
    returned (an LA layer or the next stage's residual uses them);
    otherwise the fused ``scaled_dot_product_attention`` runs and None is
    returned.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads.
        sr_ratio (int): Spatial reduction of keys and values. Default: 1.
        qkv_bias (bool): Bias in the q / kv projections. Default: True.
        keep_logits (bool): Return the pre-softmax logits. Default: False.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 sr_ratio: int = 1,
                 qkv_bias: bool = True,
                 keep_logits: bool = False):
        super().__init__(embed_dims, num_heads, sr_ratio)
        self.keep_logits = keep_logits
        self.scale = (embed_dims // num_heads)**-0.5
        self.q = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
        self.kv = nn.Linear(embed_dims, embed_dims * 2, bias=qkv_bias)

    def forward(self,
                x: torch.Tensor,
                hw_shape: Grid,
                bias: Optional[torch.Tensor] = None):
        q = self.split_heads(self.q(x))
        kv_tokens, _ = self.reduce(x, hw_shape)
        k, v = map(self.split_heads, self.kv(kv_tokens).chunk(2, dim=-1))
        if not self.keep_logits:
            if bias is not None:
                bias = bias.to(q.dtype)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
            return self.output(out), None
        logits = (q * self.scale) @ k.transpose(-2, -1)
        if bias is not None:
            logits = logits + bias
        return self.output(logits.softmax(dim=-1).to(v.dtype) @ v), logits


@ATTENTIONS.register_module()
class LessAttention(SpatialReductionAttention):
    """LA layer: no queries, no keys (paper Eq. 5).

    ``forward(x, hw_shape, prev_logits)`` transforms the previous layer's
    logits with ``transform`` and applies their softmax to this layer's own
    values; returns ``(output, logits)``.

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
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 sr_ratio: int = 1,
                 transform: Union[nn.Module, dict] = dict(type='conv'),
                 qkv_bias: bool = True,
                 grid_size: Optional[Grid] = None):
        super().__init__(embed_dims, num_heads, sr_ratio)
        self.v = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
        if isinstance(transform, dict):
            transform = build_attention_transform(
                transform, num_heads, grid_size,
                None if grid_size is None else grid_after_stride(
                    grid_size, sr_ratio))
        self.transform = transform

    def map_grids(self, hw_shape: Grid) -> Tuple[Grid, Grid]:
        """Query and key grids of this layer's maps."""
        return tuple(hw_shape), grid_after_stride(hw_shape, self.sr_ratio)

    def forward(self, x: torch.Tensor, hw_shape: Grid,
                prev_logits: torch.Tensor):
        v_tokens, v_hw = self.reduce(x, hw_shape)
        v = self.split_heads(self.v(v_tokens))
        logits = self.transform(prev_logits, tuple(hw_shape), v_hw)
        return self.output(logits.softmax(dim=-1).to(v.dtype) @ v), logits


# ------------------------------------------------------- window attention
class _WindowLayout:
    """Swin's (shifted) window partition for the window VA / LA layers:
    tokens padded to whole windows, rolled by half a window when shifted
    (also a map of one window, as mmpretrain's Swin with
    ``pad_small_map=True``), with the additive mask that keeps rolled-in
    tokens apart."""

    def init_windows(self, window_size: int, shift: bool) -> None:
        self.window_size = to_2tuple_int(window_size)
        self.shift = shift

    def to_windows(self, x: torch.Tensor, hw_shape: Grid):
        """``(B, H*W, C)`` -> windows ``(B*nW, wh*ww, C)``, their layout and
        the shift mask ``(nW, N, N)`` (None without shift)."""
        x, padded = pad_to_multiple(x, hw_shape, self.window_size)
        shift, mask = (0, 0), None
        if self.shift:
            shift = tuple(w // 2 for w in self.window_size)
            x = torch.roll(x, (-shift[0], -shift[1]), dims=(1, 2))
            mask = shifted_window_mask(padded, self.window_size, shift,
                                       x.device).to(x.dtype)
        return (window_partition(x, self.window_size), (padded, shift),
                mask)

    @staticmethod
    def window_softmax(logits: torch.Tensor,
                       mask: Optional[torch.Tensor]) -> torch.Tensor:
        """Softmax of ``(B*nW, heads, N, N)`` logits with the shift mask
        ``(nW, N, N)`` added to every image's windows."""
        if mask is not None:
            logits = (logits.unflatten(0, (-1, mask.shape[0])) +
                      mask[:, None]).flatten(0, 1)
        return logits.softmax(dim=-1)

    def from_windows(self, windows: torch.Tensor, layout, hw_shape: Grid):
        padded, shift = layout
        x = window_reverse(windows, padded, self.window_size)
        if shift != (0, 0):
            x = torch.roll(x, shift, dims=(1, 2))
        return crop_tokens(x, hw_shape)

    def extra_repr(self) -> str:
        return (f'{super().extra_repr()}, window_size={self.window_size}, '
                f'shift={self.shift}')


@ATTENTIONS.register_module()
class WindowVanillaAttention(_WindowLayout, VanillaAttention):
    """VA layer inside Swin's (shifted) windows, with Swin's relative
    position bias.

    ``forward(x, hw_shape, bias)`` adds ``bias`` ``(B, heads, N, N)`` (the
    Attention Residual, one map per image) to every window's logits;
    returns ``(output, logits)``, the logits ``(B*nW, heads, N, N)``
    without the shift mask (an LA layer re-adds it) or None unless
    ``keep_logits``.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads.
        window_size (int): Window side. Default: 7.
        shift (bool): Shift the windows by half a window. Default: False.
        qkv_bias (bool): Bias in the q / kv projections. Default: True.
        keep_logits (bool): Return the pre-softmax logits. Default: False.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 window_size: int = 7,
                 shift: bool = False,
                 qkv_bias: bool = True,
                 keep_logits: bool = False):
        super().__init__(embed_dims, num_heads, qkv_bias=qkv_bias,
                         keep_logits=keep_logits)
        self.init_windows(window_size, shift)
        self.relative_position_bias = RelativePositionBias(
            self.window_size, num_heads)

    def forward(self,
                x: torch.Tensor,
                hw_shape: Grid,
                bias: Optional[torch.Tensor] = None):
        windows, layout, mask = self.to_windows(x, hw_shape)
        q = self.split_heads(self.q(windows))
        k, v = map(self.split_heads, self.kv(windows).chunk(2, dim=-1))
        logits = (q * self.scale) @ k.transpose(-2, -1)
        logits = logits + self.relative_position_bias().to(logits.dtype)
        if bias is not None:  # one map per image, added to its windows
            logits = (logits.unflatten(0, (bias.shape[0], -1)) +
                      bias.unsqueeze(1).to(logits.dtype)).flatten(0, 1)
        out = self.output(
            self.window_softmax(logits, mask).to(v.dtype) @ v)
        return (self.from_windows(out, layout, hw_shape),
                logits if self.keep_logits else None)


@ATTENTIONS.register_module()
class WindowLessAttention(_WindowLayout, LessAttention):
    """LA layer inside Swin's windows: transforms the previous layer's
    window logits ``(B*nW, heads, N, N)`` and applies their softmax to this
    layer's values.

    The layer works in the windows of the logits it transforms: build it
    with the ``shift`` of the layer that computed them (see
    ``docs/lavit.md``: a layer whose windows straddled the source windows
    would need scores of token pairs no layer compared). The windows have
    the same size at every input size, so the paper's dense transform
    (``N x N`` maps, N = wh*ww) serves any input here.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads.
        window_size (int): Window side. Default: 7.
        shift (bool): Windows shifted by half a window. Default: False.
        transform (nn.Module | dict): ``dict(type='conv', kernel_size=3)``
            or ``dict(type='dense')`` (the paper's maps over a window's
            tokens). Default: ``dict(type='conv')``.
        qkv_bias (bool): Bias in the v projection. Default: True.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 window_size: int = 7,
                 shift: bool = False,
                 transform: Union[nn.Module, dict] = dict(type='conv'),
                 qkv_bias: bool = True):
        window = to_2tuple_int(window_size)
        if isinstance(transform, dict) and transform['type'] == 'dense':
            transform = dict(transform, input_size=window)
        super().__init__(embed_dims, num_heads, transform=transform,
                         qkv_bias=qkv_bias, grid_size=window)
        self.init_windows(window, shift)

    def map_grids(self, hw_shape: Grid) -> Tuple[Grid, Grid]:
        return self.window_size, self.window_size

    def forward(self, x: torch.Tensor, hw_shape: Grid,
                prev_logits: torch.Tensor):
        windows, layout, mask = self.to_windows(x, hw_shape)
        v = self.split_heads(self.v(windows))
        logits = self.transform(prev_logits, self.window_size,
                                self.window_size)
        out = self.output(
            self.window_softmax(logits, mask).to(v.dtype) @ v)
        return self.from_windows(out, layout, hw_shape), logits


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

    def __init__(self,
                 in_heads: int,
                 out_heads: int,
                 layer_scale_init: float = 0.1,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        self.downsample = nn.Conv2d(in_heads, in_heads, 2, stride=2,
                                    groups=in_heads, bias=False)
        nn.init.constant_(self.downsample.weight, 0.25)
        self.norm = nn.GroupNorm(1, in_heads, affine=False)
        self.head_proj = nn.Conv2d(in_heads, out_heads, 1, bias=False)
        self.layer_scale = LayerScale(
            out_heads, layer_scale_init, data_format='channels_first')

    def forward(self, logits: torch.Tensor, src_hw: Grid,
                dst_hw: Grid) -> torch.Tensor:
        """``(B, h_in, N_src, N_k)`` -> ``(B, h_out, N_dst, N_k)``."""
        B, h, _, Nk = logits.shape
        x = logits.permute(0, 3, 1, 2).reshape(B * Nk, h, *src_hw)
        x = F.pad(x, (0, src_hw[1] % 2, 0, src_hw[0] % 2))
        x = self.layer_scale(self.head_proj(self.norm(self.downsample(x))))
        if tuple(x.shape[-2:]) != tuple(dst_hw):
            raise ValueError(f'attention residual maps a {src_hw} query grid '
                             f'to {tuple(x.shape[-2:])}, not {dst_hw}')
        return x.reshape(B, Nk, x.shape[1], -1).permute(0, 2, 3, 1)


class WindowAttentionResidual(BaseModule):
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
        window_size (int): Window side. Default: 7.
        layer_scale_init (float): Initial LayerScale. Default: 0.1.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """

    def __init__(self,
                 in_heads: int,
                 out_heads: int,
                 window_size: int = 7,
                 layer_scale_init: float = 0.1,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        self.window_size = to_2tuple_int(window_size)
        self.norm = nn.GroupNorm(1, in_heads, affine=False)
        self.head_proj = nn.Conv2d(in_heads, out_heads, 1, bias=False)
        self.layer_scale = LayerScale(
            out_heads, layer_scale_init, data_format='channels_first')

    def forward(self, logits: torch.Tensor, src_hw: Grid,
                dst_hw: Grid) -> torch.Tensor:
        """``(B*nW_src, h_in, N, N)`` -> ``(B, h_out, N, N)``."""
        # Integer arithmetic, no generator: stays symbolic in one graph when
        # captured (ONNX, torch.compile).
        (H, W), (wh, ww) = src_hw, self.window_size
        num_windows = ((H + wh - 1) // wh) * ((W + ww - 1) // ww)
        _, h, N, _ = logits.shape
        x = logits.view(-1, num_windows, h, N, N).mean(dim=1)
        return self.layer_scale(self.head_proj(self.norm(x)))


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


# ---------------------------------------------------------------- backbones
def less_attention_layers(depths: Sequence[int], la_start: Sequence[int],
                          vanilla: Union[dict, Sequence[dict]], less: dict,
                          attn_residual: bool) -> List[List[dict]]:
    """The attention config of every block: per stage, VA layers
    (``vanilla``: one dict, or one per block) up to the first LA layer
    ``la_start`` (1-based; 0: none), then LA layers (``less``).

    A VA layer keeps its logits when an LA layer or the next stage's
    attention residual reuses them.
    """
    for i, start in enumerate(la_start):
        if start != 0 and not 2 <= start <= depths[i]:
            raise ValueError(
                f'la_start[{i}] = {start}: the first LA layer of a stage is '
                f'layer 2..{depths[i]} (1-based), or 0 for none')
    cfgs = []
    for i, (depth, start) in enumerate(zip(depths, la_start)):
        va = [vanilla] * depth if isinstance(vanilla, dict) else vanilla[i]
        layers = []
        for j in range(depth):
            if start and j + 1 >= start:
                layers.append(dict(less))
                continue
            next_is_la = bool(start) and j + 2 >= start and j + 1 < depth
            feeds_residual = (attn_residual and j + 1 == depth
                              and i + 1 < len(depths))
            layers.append(
                dict(va[j], keep_logits=next_is_la or feeds_residual))
        cfgs.append(layers)
    return cfgs


class LessAttentionMixin(AuxLossBackbone):
    """Runs Less-Attention in any skeleton with a
    :meth:`~VitAttnBackbone.forward_block` hook and a ``forward_stages``.

    VA layers compute logits (the first VA layer of a stage adding the
    :meth:`attention_residual` of the previous stage's last logits), LA
    layers transform the previous layer's; the per-pass ``state`` carries
    the logits and grid between blocks and stages and collects the LA maps,
    whose Diagonality-Preserving loss (weight ``dp_loss_weight``, mean over
    LA layers) is returned as ``loss_dp`` by ``pop_aux_losses()`` after a
    training forward pass.
    """

    dp_loss_weight: float = 0.

    def attention_residual(self, stage: int) -> Optional[nn.Module]:
        """The module bringing the previous stage's logits to ``stage``."""
        return None

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        self.clear_aux_losses()
        outs, state = self.forward_stages(x)
        la_maps = state.get('la_maps')
        if la_maps:
            loss = sum(diagonality_preserving_loss(*m) for m in la_maps)
            self.add_aux_loss('loss_dp',
                              self.dp_loss_weight * loss / len(la_maps))
        return outs

    def _wants_dp_loss(self) -> bool:
        """Only a training pass with gradients keeps the LA maps (eval,
        ``mode='tensor'``, FLOP counting and export keep nothing)."""
        return (self.dp_loss_weight > 0 and self.training
                and torch.is_grad_enabled())

    def forward_block(self, block: nn.Module, x: torch.Tensor,
                      hw_shape: Grid, state: dict, stage: int,
                      index: int) -> torch.Tensor:
        attn = block.attn
        if isinstance(attn, LessAttention):
            x, logits = block(x, hw_shape, state['logits'])
            if self._wants_dp_loss():
                state.setdefault('la_maps', []).append(
                    (logits, *attn.map_grids(hw_shape)))
        elif isinstance(attn, VanillaAttention):
            residual = None
            module = self.attention_residual(stage) if index == 0 else None
            if module is not None and state.get('logits') is not None:
                residual = module(state['logits'], state['hw_shape'],
                                  hw_shape)
            x, logits = block(x, hw_shape, residual)
        else:
            return block(x, hw_shape)
        state.update(logits=logits, hw_shape=hw_shape)
        return x


@register_model
class LaViT(LessAttentionMixin, AttnPVT):
    """LaViT backbone: PVT with Less-Attention layers (paper Table 1).

    :class:`AttnPVT` whose blocks are VA (:class:`VanillaAttention`) and LA
    (:class:`LessAttention`) layers, with an :class:`AttentionResidual` at
    the start of every stage but the first and the Diagonality-Preserving
    loss over the LA maps; the attention logits travel between layers and
    stages through :class:`LessAttentionMixin`. With
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
        in_channels (int): Input channels. Default: 3.
        sr_ratios (Sequence[int]): Spatial reduction of keys / values per
            stage. With the Attention Residual each must halve the previous
            one (the key grid stays the same). Default: (8, 4, 2, 1).
        qkv_bias (bool): Bias in the q / kv / v projections. Default: True.
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
        drop_path_rate (float): Stochastic depth rate. Default: 0.1.
        out_indices (Sequence[int] | int): Output stages, each with its own
            LayerNorm. Default: (0, 1, 2, 3).
        norm_cfg (dict): Norms of the blocks and outputs.
            Default: ``dict(type='LN', eps=1e-6)``.
        with_cp (bool): Gradient checkpointing per block (the DP loss is
            computed outside the checkpointed blocks). Default: False.
        frozen_stages (int): Stages to freeze (-1: none). Default: -1.
        norm_eval (bool): Keep BatchNorm in eval mode (LaViT has none).
            Default: False.
        init_cfg (dict, optional): ``dict(type='Pretrained', checkpoint=...)``
            loads weights, e.g. an mmpretrain LaViT classifier checkpoint.
            Default: None.
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
                 in_channels: int = 3,
                 sr_ratios: Sequence[int] = (8, 4, 2, 1),
                 qkv_bias: bool = True,
                 less_attention: bool = True,
                 la_transform: str = 'conv',
                 la_kernel_size: int = 3,
                 attn_residual: bool = True,
                 ar_layer_scale_init: float = 0.1,
                 dp_loss_weight: float = 0.1,
                 drop_path_rate: float = 0.1,
                 out_indices: Union[int, Sequence[int]] = (0, 1, 2, 3),
                 norm_cfg: dict = dict(type='LN', eps=1e-6),
                 with_cp: bool = False,
                 frozen_stages: int = -1,
                 norm_eval: bool = False,
                 init_cfg: Optional[dict] = None):
        settings = self.parse_arch(arch)
        depths, num_heads = settings['depths'], settings['num_heads']
        num_stages = len(depths)
        if num_stages != 4 or len(sr_ratios) != num_stages:
            raise ValueError('LaViT has 4 stages; sr_ratios and the arch '
                             'need one entry each')
        if attn_residual and any(sr_ratios[i - 1] != 2 * sr_ratios[i]
                                 for i in range(1, num_stages)):
            raise ValueError(
                'the attention residual needs the same key grid in every '
                'stage: each sr_ratio must halve the previous one, e.g. '
                f'(8, 4, 2, 1); got {tuple(sr_ratios)}')
        attn_cfgs = less_attention_layers(
            depths,
            settings['la_start'] if less_attention else [0] * num_stages,
            vanilla=dict(type='VanillaAttention'),
            less=dict(
                type='LessAttention',
                transform=transform_cfg(la_transform, la_kernel_size,
                                        pretrain_img_size)),
            attn_residual=attn_residual)
        super().__init__(
            arch=settings,
            attn_cfgs=attn_cfgs,
            pretrain_img_size=pretrain_img_size,
            in_channels=in_channels,
            sr_ratios=sr_ratios,
            qkv_bias=qkv_bias,
            drop_path_rate=drop_path_rate,
            out_indices=out_indices,
            norm_cfg=norm_cfg,
            with_cp=with_cp,
            frozen_stages=frozen_stages,
            norm_eval=norm_eval,
            init_cfg=init_cfg)
        self.sr_ratios = tuple(sr_ratios)
        self.dp_loss_weight = dp_loss_weight
        if attn_residual:
            for i in range(1, num_stages):
                self.stages[i]['attn_residual'] = AttentionResidual(
                    num_heads[i - 1], num_heads[i], ar_layer_scale_init)

    def attention_residual(self, stage: int) -> Optional[nn.Module]:
        blocks = self.stages[stage]
        return blocks['attn_residual'] if 'attn_residual' in blocks else None


@register_model
class LessAttnViT(LessAttentionMixin, AttnViT):
    """Less-Attention plug-in for plain ViTs (LaViT Table 5: ViT+LA,
    DeiT+LA): the :class:`AttnViT` skeleton whose first ``la_start - 1``
    blocks are VA layers (:class:`VanillaAttention`, plain multi-head
    self-attention) and the rest LA layers (:class:`LessAttention`).

    A plain ViT has one stage, so there is no Attention Residual. DeiT+LA is
    the default DeiT layout (conv patches, learned positions); ViT+LA the
    Simple-ViT one (``patch_embed='pixel_norm', pos_embed='sincos'``).

    Args:
        arch (str | dict): 'tiny', 'small' (or 't', 's'), or a dict with
            ``embed_dims``, ``depth``, ``num_heads`` and optionally
            ``la_start``. Default: 'tiny'.
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
        pretrain_img_size (int | tuple[int, int]): Sizes the learned
            position embedding and the dense transform. Default: 224.
        **kwargs: The other :class:`AttnViT` arguments (``patch_embed``,
            ``pos_embed``, ``out_indices``, ``out_type``,
            ``drop_path_rate``, ``with_cp``, ``frozen_stages``,
            ``init_cfg``, ...).
    """
    arch_zoo = {
        ('t', 'tiny'): dict(embed_dims=192, depth=12, num_heads=3,
                            la_start=4),
        ('s', 'small'): dict(embed_dims=384, depth=12, num_heads=6,
                             la_start=4),
    }

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 la_start: Optional[int] = None,
                 less_attention: bool = True,
                 la_transform: str = 'conv',
                 la_kernel_size: int = 3,
                 dp_loss_weight: float = 0.1,
                 pretrain_img_size: Union[int, Tuple[int, int]] = 224,
                 **kwargs):
        if 'attn_cfgs' in kwargs:
            raise TypeError(f'{type(self).__name__} builds its own '
                            'attn_cfgs from la_start')
        settings = self.parse_arch(arch)
        la_start = settings.pop('la_start', None) if la_start is None \
            else la_start
        if la_start is None:
            raise ValueError('give la_start (the first LA block, 1-based) '
                             'with a custom arch')
        layers, = less_attention_layers(
            [settings['depth']], [la_start if less_attention else 0],
            vanilla=dict(type='VanillaAttention'),
            less=dict(
                type='LessAttention',
                transform=transform_cfg(la_transform, la_kernel_size,
                                        pretrain_img_size)),
            attn_residual=False)
        super().__init__(
            arch=settings,
            attn_cfgs=layers,
            pretrain_img_size=pretrain_img_size,
            **kwargs)
        self.dp_loss_weight = dp_loss_weight


@register_model
class LessAttnSwinTransformer(LessAttentionMixin, AttnSwinTransformer):
    """Less-Attention plug-in for Swin (LaViT Table 5: Swin+LA): the
    :class:`AttnSwinTransformer` skeleton whose blocks are window VA layers
    (:class:`WindowVanillaAttention`, Swin's window attention with its
    shift alternation and relative position bias) up to ``la_start`` in
    each stage, then window LA layers (:class:`WindowLessAttention`), with a
    :class:`WindowAttentionResidual` at the start of every stage but the
    first and the Diagonality-Preserving loss over the LA maps.

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
        vanilla = [[
            dict(type='WindowVanillaAttention', window_size=window_size,
                 shift=j % 2 == 1) for j in range(depth)
        ] for depth in depths]
        layers = less_attention_layers(
            depths, la_start, vanilla=vanilla,
            less=dict(type='WindowLessAttention', window_size=window_size,
                      transform=transform_cfg(la_transform, la_kernel_size,
                                              window_size)),
            attn_residual=attn_residual)
        for stage, start in zip(layers, la_start):
            if start:  # LA layers keep the windows of the last VA layer
                for cfg in stage[start - 1:]:
                    cfg['shift'] = stage[start - 2]['shift']
        super().__init__(
            arch=settings, attn_cfgs=layers, window_size=window_size,
            **kwargs)
        self.dp_loss_weight = dp_loss_weight
        if attn_residual:
            for i in range(1, len(depths)):
                self.stages[i].attn_residual = WindowAttentionResidual(
                    num_heads[i - 1], num_heads[i], window_size,
                    ar_layer_scale_init)

    def attention_residual(self, stage: int) -> Optional[nn.Module]:
        return getattr(self.stages[stage], 'attn_residual', None)
