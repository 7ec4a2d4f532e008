"""Multi-head self-attention: ViT's attention, and L2ViT's in windows."""
from typing import Optional

import torch
import torch.nn as nn

from ...registry import ATTENTIONS
from .base import AttentionOutput, Grid, QueryAttention, TokenAttention
from .functional import (check_heads, merge_heads, softmax_attention,
                         softmax_query, split_heads)


@ATTENTIONS.register_module(name='LocalWindowAttention')
@ATTENTIONS.register_module()
class MultiheadSelfAttention(TokenAttention):
    """Multi-head self-attention, ``softmax(q k^T / sqrt(d)) v``.

    mmpretrain's ``MultiheadAttention`` on the attention protocol (``qkv``,
    ``proj``; mmseg's ``nn.MultiheadAttention`` weights are migrated by the
    ViT skeleton). In windows it takes Swin's shift mask; L2ViT's local
    window attention is this module in unshifted windows (also registered
    as ``LocalWindowAttention``).

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads.
        qkv_bias (bool): Bias in ``qkv``. Default: True.
        qk_scale (float, optional): Overrides ``head_dims ** -0.5``.
            Default: None.
        attn_drop (float): Dropout of the attention weights. Default: 0.
        proj_drop (float): Dropout after ``proj``. Default: 0.
        proj_bias (bool): Bias in ``proj``. Default: True.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """
    takes_mask = True
    grid_free = True

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 qkv_bias: bool = True,
                 qk_scale: Optional[float] = None,
                 attn_drop: float = 0.,
                 proj_drop: float = 0.,
                 proj_bias: bool = True,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        head_dims = check_heads(embed_dims, num_heads)
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.scale = qk_scale or head_dims**-0.5
        self.qkv = nn.Linear(embed_dims, embed_dims * 3, bias=qkv_bias)
        self.attn_drop = attn_drop
        self.proj = nn.Linear(embed_dims, embed_dims, bias=proj_bias)
        self.proj_drop = nn.Dropout(proj_drop)

    def _qkv(self, x: torch.Tensor):
        return [split_heads(t, self.num_heads)
                for t in self.qkv(x).chunk(3, dim=-1)]

    def forward(self,
                x: torch.Tensor,
                hw_shape: Grid,
                state=None,
                mask: Optional[torch.Tensor] = None) -> AttentionOutput:
        """``(B, N, C)`` tokens -> same shape (the grid is not needed);
        ``mask``: Swin's ``(num_windows, N, N)`` shift mask in windows."""
        out = softmax_attention(
            *self._qkv(x), mask=mask, scale=self.scale,
            dropout_p=self.attn_drop if self.training else 0.)
        return self.proj_drop(self.proj(merge_heads(out))), state

    @torch.no_grad()
    def query_attention(self, x: torch.Tensor, hw_shape: Grid,
                        index: int) -> QueryAttention:
        """Softmax weights of query ``index`` over the grid's keys."""
        q, k, _ = (t[0] for t in self._qkv(x[:1]))
        return softmax_query(q, k, index, hw_shape, self.scale,
                             extra_tokens=x.shape[1] -
                             hw_shape[0] * hw_shape[1])

    def extra_repr(self) -> str:
        return f'embed_dims={self.embed_dims}, num_heads={self.num_heads}'
