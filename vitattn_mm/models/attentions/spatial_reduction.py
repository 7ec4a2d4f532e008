"""PVT's spatial-reduction attention, and what PVT-style attentions share."""
from typing import Optional, Tuple, Union

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer

from ...registry import ATTENTIONS
from ..layers.common import autocast_once, nchw_to_nlc, nlc_to_nchw
from ..layers.padding import pad_corner
from .base import (AttentionOutput, Grid, QueryAttention, TokenAttention,
                   argument_value)
from .functional import (check_heads, merge_heads, softmax_attention,
                         softmax_query, split_heads)


class SpatialReduction(TokenAttention):
    """What PVT-style attentions share: keys and / or values from the map
    reduced by a strided ``sr_ratio`` conv (``sr``) and a norm (``norm``),
    and the output projection ``proj``.

    Without a reduction (``sr_ratio=1``) the grid is not needed, so such an
    attention takes a class token, and its keys are its queries' tokens,
    so a softmax one takes Swin's mask in shifted windows
    (:meth:`refusal`).

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads.
        sr_ratio (int): Spatial reduction. Default: 1.
        sr_padding (int | str): 0: the reduction drops a partial patch at
            the bottom / right (PVT, mmdet); 'corner': it pads one (the
            reduced grid is ``ceil(H / sr) x ceil(W / sr)``, as LaViT
            needs). Default: 0.
        norm_cfg (dict): Norm after the reduction. Default:
            ``dict(type='LN')``.
        proj_drop (float): Dropout after ``proj``. Default: 0.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """
    grid_free = True

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 sr_ratio: int = 1,
                 sr_padding: Union[int, str] = 0,
                 norm_cfg: dict = dict(type='LN'),
                 proj_drop: float = 0.,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        self.head_dims = check_heads(embed_dims, num_heads)
        if sr_padding not in (0, 'corner'):
            raise ValueError(f"sr_padding must be 0 or 'corner', got "
                             f'{sr_padding!r}')
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.sr_ratio = sr_ratio
        self.sr_padding = sr_padding
        if sr_ratio > 1:
            self.sr = nn.Conv2d(embed_dims, embed_dims, sr_ratio, sr_ratio)
            self.norm = build_norm_layer(norm_cfg, embed_dims)[1]
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)

    @classmethod
    def refusal(cls, capability: str,
                cfg: Optional[dict] = None) -> Optional[str]:
        """A reduction makes keys and values grid-bound: no class token,
        and no mask of a window's ``N x N`` pairs (the keys are fewer)."""
        reason = super().refusal(capability, cfg)
        sr_ratio = argument_value(cls, cfg, 'sr_ratio')
        if reason is None and sr_ratio > 1 and capability in ('grid_free',
                                                             'takes_mask'):
            what = 'class token' if capability == 'grid_free' else \
                "mask of a window's token pairs"
            return (f'{cls.__name__} with sr_ratio={sr_ratio} takes no '
                    f'{what}: its keys are on a grid reduced {sr_ratio}x')
        return reason

    @classmethod
    def min_grid(cls, cfg: Optional[dict] = None) -> int:
        if argument_value(cls, cfg, 'sr_padding') == 'corner':
            return 1
        return argument_value(cls, cfg, 'sr_ratio')

    def reduce(self, x: torch.Tensor, hw_shape: Grid):
        """The tokens keys / values come from, and their grid."""
        if self.sr_ratio == 1:
            return x, tuple(hw_shape)
        x = nlc_to_nchw(x, hw_shape)
        if self.sr_padding == 'corner':
            x = pad_corner(x, (self.sr_ratio, self.sr_ratio))
        x = self.sr(x)
        return self.norm(nchw_to_nlc(x)), tuple(x.shape[-2:])

    def output(self, out: torch.Tensor) -> torch.Tensor:
        """Merge the heads of ``(B, heads, N, d)``, project."""
        return self.proj_drop(self.proj(merge_heads(out)))

    def extra_repr(self) -> str:
        return (f'embed_dims={self.embed_dims}, num_heads={self.num_heads}, '
                f'sr_ratio={self.sr_ratio}')


@ATTENTIONS.register_module()
class SpatialReductionAttention(SpatialReduction):
    """PVT's attention: softmax attention whose keys and values come from
    the map reduced by a strided ``sr_ratio`` conv and a norm.

    The parameters of the official PVT and of mmdet's (``q``, ``kv``,
    ``proj``, ``sr``, ``norm``; mmdet's fused ``attn.in_proj`` /
    ``out_proj`` are migrated by the PVT skeleton), and mmdet's result.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads.
        sr_ratio (int): Spatial reduction of keys and values. Default: 1.
        qkv_bias (bool): Bias in ``q`` and ``kv``. Default: True.
        qk_scale (float, optional): Overrides ``head_dims ** -0.5``.
            Default: None.
        attn_drop (float): Dropout of the attention weights. Default: 0.
        **kwargs: :class:`SpatialReduction` arguments (``sr_padding``,
            ``norm_cfg``, ``proj_drop``).
    """
    takes_mask = True

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 sr_ratio: int = 1,
                 qkv_bias: bool = True,
                 qk_scale: Optional[float] = None,
                 attn_drop: float = 0.,
                 **kwargs):
        super().__init__(embed_dims, num_heads, sr_ratio, **kwargs)
        self.scale = qk_scale or self.head_dims**-0.5
        self.q = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
        self.kv = nn.Linear(embed_dims, embed_dims * 2, bias=qkv_bias)
        self.attn_drop = attn_drop

    def project(self, x: torch.Tensor, hw_shape: Grid) -> Tuple:
        """Heads of q, k, v and the key grid."""
        # The tokens reach two projections (or one and the reduction).
        x, x_reduced = autocast_once(x)
        kv_tokens, kv_hw = self.reduce(x_reduced, hw_shape)
        k, v = self.kv(kv_tokens).chunk(2, dim=-1)
        return (split_heads(self.q(x), self.num_heads),
                split_heads(k, self.num_heads),
                split_heads(v, self.num_heads), kv_hw)

    def forward(self,
                x: torch.Tensor,
                hw_shape: Grid,
                state=None,
                mask: Optional[torch.Tensor] = None) -> AttentionOutput:
        """``(B, H*W, C)`` tokens -> same shape; ``mask``: Swin's shift mask
        (in windows, ``sr_ratio=1`` only)."""
        q, k, v, _ = self.project(x, hw_shape)
        out = softmax_attention(
            q, k, v, mask=mask, scale=self.scale,
            dropout_p=self.attn_drop if self.training else 0.)
        return self.output(out), state

    @torch.no_grad()
    def query_attention(self, x: torch.Tensor, hw_shape: Grid,
                        index: int) -> QueryAttention:
        """Softmax weights of query ``index`` over the reduced keys."""
        q, k, _, kv_hw = self.project(x[:1], hw_shape)
        return softmax_query(q[0], k[0], index, kv_hw, self.scale)
