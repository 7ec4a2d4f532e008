"""The Attention Residual: a stage's last attention logits, carried into the
first VA layer of the next stage (paper Eq. 6-7)."""
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.model import BaseModule

from ...layers.layer_scale import LayerScale
from ...layers.padding import grid_after_stride
from ..base import Grid
from .state import LessAttentionState


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
        if state.queries_factor():
            q, k, bias = state.factors
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
        H, W = x.shape[2] // 2, x.shape[3] // 2
        # Each 2x2 cell times its head's taps, summed: two ops each way
        # where four strided slices, their taps and sums took twenty.
        taps = self.downsample.weight.view(1, h, 1, 2, 1, 2, 1)
        out = (x.view(B, h, H, 2, W, 2, D) * taps).sum((3, 5))
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
