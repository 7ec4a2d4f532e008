"""CSwin's cross-shaped window attention.

Dong et al., "CSWin Transformer: A General Vision Transformer Backbone with
Cross-Shaped Windows", CVPR 2022 (https://arxiv.org/abs/2107.00652).
"""
from typing import Optional, Tuple

import torch
import torch.nn as nn
from mmengine.model import ModuleList

from ...registry import ATTENTIONS
from ..layers.windows import (crop_tokens, pad_to_multiple, window_partition,
                              window_reverse)
from .base import AttentionOutput, Grid, QueryAttention, TokenAttention
from .functional import (check_heads, softmax_attention, softmax_query,
                         split_heads)


@ATTENTIONS.register_module()
class CrossShapedWindowAttention(TokenAttention):
    """CSwin's cross-shaped window self-attention with LePE.

    The first half of the channels (and heads) attends within vertical
    stripes ``split_size`` tokens wide and as high as the map, the second
    half within horizontal stripes ``split_size`` tokens high; the halves
    are concatenated before ``proj``. ``split_size=None`` is the variant of
    CSwin's last stage: all heads over the whole map. In every stripe,
    ``out = softmax(q k^T / sqrt(d)) v + LePE(v)``, LePE being a 3x3
    depthwise conv of the stripe's values (zero-padded at the stripe's
    border), one per branch (``lepe.{branch}``).

    Any grid: a side that is not a multiple of ``split_size`` ends with a
    narrower stripe. This is computed by padding the map with zero tokens
    to a multiple, removing the padded keys from the softmax and cropping
    the padded queries, so the padding never changes a real token's output
    (and LePE sees the same zeros past the last real token as at any stripe
    border). At multiples of the stripe width this is exactly the official
    computation. (The official segmentation code pads instead with zero
    keys that take part in the softmax.)

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads; even when ``split_size`` is set.
        qkv_bias (bool): Bias in the qkv projection. Default: True.
        split_size (int, optional): Stripe width in tokens; None attends
            over the whole map. Default: 7.
        attn_drop (float): Dropout of the attention weights. Default: 0.
        proj_drop (float): Dropout after ``proj``. Default: 0.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 qkv_bias: bool = True,
                 split_size: Optional[int] = 7,
                 attn_drop: float = 0.,
                 proj_drop: float = 0.,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        head_dims = check_heads(embed_dims, num_heads)
        self.num_branches = 1 if split_size is None else 2
        if num_heads % self.num_branches:
            raise ValueError('cross-shaped windows split the heads between '
                             'horizontal and vertical stripes, so num_heads '
                             f'must be even, got {num_heads}')
        if split_size is not None and split_size < 1:
            raise ValueError(f'split_size must be >= 1, got {split_size}')
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.split_size = split_size
        self.scale = head_dims**-0.5
        self.attn_drop = attn_drop
        self.qkv = nn.Linear(embed_dims, embed_dims * 3, bias=qkv_bias)
        branch_dims = embed_dims // self.num_branches
        self.lepe = ModuleList([
            nn.Conv2d(branch_dims, branch_dims, 3, padding=1,
                      groups=branch_dims) for _ in range(self.num_branches)
        ])
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)

    def stripe(self, branch: int) -> Tuple[Optional[int], Optional[int]]:
        """The ``(height, width)`` of branch ``branch``'s windows, None for
        a whole side: vertical stripes, horizontal stripes, or the map."""
        if self.split_size is None:
            return None, None
        return (None, self.split_size) if branch == 0 else (self.split_size,
                                                            None)

    def forward(self, x: torch.Tensor, hw_shape: Grid,
                state=None) -> AttentionOutput:
        """``(B, H*W, C)`` tokens on an ``(H, W)`` grid -> same shape."""
        qkv = (t.chunk(self.num_branches, dim=-1)
               for t in self.qkv(x).chunk(3, dim=-1))
        out = [
            self._attend_stripes(branch, q, k, v, tuple(hw_shape))
            for branch, (q, k, v) in enumerate(zip(*qkv))
        ]
        return self.proj_drop(self.proj(torch.cat(out, dim=-1))), state

    def _attend_stripes(self, branch: int, q: torch.Tensor, k: torch.Tensor,
                        v: torch.Tensor, hw_shape: Grid) -> torch.Tensor:
        sides = self.stripe(branch)
        window = tuple(s if w is None else w for s, w in zip(hw_shape, sides))
        padded_hw = None
        windows = []
        for t in (q, k, v):
            t, padded_hw = pad_to_multiple(t, hw_shape, sides)
            windows.append(window_partition(t, window))
        q, k, v = windows
        num_windows, length, channels = v.shape
        lepe = self.lepe[branch](v.transpose(1, 2).reshape(
            num_windows, channels, *window))
        lepe = lepe.flatten(2).transpose(1, 2)

        # Keys that are padding take no part: one boolean mask per window of
        # an image, (nW, 1, N_k), broadcast over images, heads and queries.
        real = torch.ones(1, hw_shape[0] * hw_shape[1], 1, dtype=torch.bool,
                          device=v.device)
        real = window_partition(
            pad_to_multiple(real, hw_shape, sides)[0], window)
        heads = self.num_heads // self.num_branches
        out = softmax_attention(
            *(split_heads(t, heads) for t in (q, k, v)),
            mask=real.transpose(1, 2), scale=self.scale,
            dropout_p=self.attn_drop if self.training else 0.)
        out = out.transpose(1, 2).reshape(num_windows, length, channels)
        out = window_reverse(out + lepe, padded_hw, window)
        return crop_tokens(out, hw_shape)

    @torch.no_grad()
    def query_attention(self, x: torch.Tensor, hw_shape: Grid,
                        index: int) -> QueryAttention:
        """Softmax weights of query ``index`` over the whole map, zero
        outside its stripe (vertical for the first half of the heads,
        horizontal for the second; LePE is not an attention distribution
        and is left out)."""
        H, W = hw_shape
        q, k, _ = (split_heads(t, self.num_heads)[0]
                   for t in self.qkv(x[:1]).chunk(3, dim=-1))
        rows = torch.arange(H, device=x.device).repeat_interleave(W)
        cols = torch.arange(W, device=x.device).repeat(H)
        row, col = divmod(index, W)
        heads = self.num_heads // self.num_branches
        outside = q.new_zeros(self.num_heads, H * W)
        for branch in range(self.num_branches):
            wh, ww = (s if w is None else w
                      for s, w in zip(hw_shape, self.stripe(branch)))
            inside = (rows // wh == row // wh) & (cols // ww == col // ww)
            outside[branch * heads:(branch + 1) * heads].masked_fill_(
                ~inside, float('-inf'))
        return softmax_query(q, k, index, (H, W), self.scale, outside)

    def extra_repr(self) -> str:
        return (f'embed_dims={self.embed_dims}, num_heads={self.num_heads}, '
                f'split_size={self.split_size}')
