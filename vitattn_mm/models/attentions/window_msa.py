"""Swin's window attention."""
from typing import Optional, Tuple, Union

import torch
import torch.nn as nn

from ...registry import ATTENTIONS
from ..layers.common import to_2tuple_int
from ..layers.windows import (add_relative_position_bias,
                              relative_position_bias)
from .base import AttentionOutput, Grid, QueryAttention, TokenAttention
from .functional import (check_heads, merge_heads, softmax_attention,
                         softmax_query, split_heads)


@ATTENTIONS.register_module()
class WindowMSA(TokenAttention):
    """Swin's window attention: ``softmax(q k^T * scale + B + mask) v`` in
    one window, ``B`` the learned relative position bias.

    mmdet's and mmpretrain's ``WindowMSA`` on the attention protocol, with
    their parameters (``qkv``, ``proj``, ``relative_position_bias_table``
    and the saved ``relative_position_index``) and their results. Run it
    in windows with :class:`~vitattn_mm.models.attentions.WindowedAttention`.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads.
        window_size (int | tuple[int, int]): The window it is run in.
        qkv_bias (bool): Bias in ``qkv``. Default: True.
        qk_scale (float, optional): Overrides ``head_dims ** -0.5``.
            Default: None.
        attn_drop (float): Dropout of the attention weights. Default: 0.
        proj_drop (float): Dropout after ``proj``. Default: 0.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """
    takes_mask = True

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 window_size: Union[int, Tuple[int, int]],
                 qkv_bias: bool = True,
                 qk_scale: Optional[float] = None,
                 attn_drop: float = 0.,
                 proj_drop: float = 0.,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        head_dims = check_heads(embed_dims, num_heads)
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.window_size = to_2tuple_int(window_size)
        self.scale = qk_scale or head_dims**-0.5
        # The index is saved in checkpoints, as mmdet and mmpretrain save it.
        add_relative_position_bias(self, self.window_size, num_heads,
                                   persistent=True)
        self.qkv = nn.Linear(embed_dims, embed_dims * 3, bias=qkv_bias)
        self.attn_drop = attn_drop
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)

    def _qkv(self, x: torch.Tensor):
        return (split_heads(t, self.num_heads)
                for t in self.qkv(x).chunk(3, dim=-1))

    def forward(self,
                x: torch.Tensor,
                hw_shape: Grid,
                state=None,
                mask: Optional[torch.Tensor] = None) -> AttentionOutput:
        """``(B * num_windows, wh * ww, C)`` windows -> same shape; ``mask``
        is Swin's ``(num_windows, N, N)`` shift mask."""
        out = softmax_attention(
            *self._qkv(x), relative_position_bias(self), mask, self.scale,
            dropout_p=self.attn_drop if self.training else 0.)
        return self.proj_drop(self.proj(merge_heads(out))), state

    @torch.no_grad()
    def query_attention(self, x: torch.Tensor, hw_shape: Grid,
                        index: int) -> QueryAttention:
        """The softmax weights of query ``index`` over its window (the
        relative position bias included)."""
        q, k, _ = (t[0] for t in self._qkv(x[:1]))
        return softmax_query(q, k, index, hw_shape, self.scale,
                             relative_position_bias(self)[:, index])

    def extra_repr(self) -> str:
        return (f'embed_dims={self.embed_dims}, num_heads={self.num_heads}, '
                f'window_size={self.window_size}')
