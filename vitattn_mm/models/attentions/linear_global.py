"""L2ViT's enhanced linear global attention and its Local Concentration
Module.

Zheng et al., "The Linear Attention Resurrection in Vision Transformer"
(https://arxiv.org/abs/2501.16182), as the official implementation
(ChuanyangZheng/L2ViT) computes it. The LCM follows the attention inside
L2ViT's global blocks (the skeleton's block adds it with its residual).
"""
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import build_activation_layer, build_norm_layer
from mmengine.model import BaseModule

from ...registry import ATTENTIONS
from ...ops import (check_backend, relu_linear_attention_eager,
                    relu_linear_attention_op, uses_fused_op)
from ..layers.common import nchw_to_nlc, nlc_to_nchw
from .base import (NO_ATTENTION_WEIGHTS, AttentionOutput, Grid,
                   QueryAttention, TokenAttention)
from .functional import check_heads


@ATTENTIONS.register_module()
class LinearGlobalAttention(TokenAttention):
    """ReLU linear attention over all tokens, keys and values first.

    Per head, with ``phi = ReLU`` and a learnable temperature ``s``
    (initialised to ``head_dim ** -0.5``)::

        out_i = phi(q_i) (s * sum_j phi(k_j)^T v_j)
                / max(phi(q_i) . sum_j phi(k_j), denominator_min)

    ``K^T V`` is a ``head_dim x head_dim`` matrix, so the cost is linear in
    the number of tokens. Clamping the denominator at 100 (the official
    value) keeps the variance of the output in check.

    Under autocast, the feature map and the products run in fp32: a sum of
    ``k^T v`` over the ~64k tokens of a 800x1280 image's first stage
    overflows fp16 (max 65504), and bf16 would keep 8 bits of such a sum.
    The projections keep the caller's precision; the fp32 part is
    ``O(N * head_dim)`` per head, small beside them.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads.
        qkv_bias (bool): Bias in the qkv projection. Default: True.
        denominator_min (float): Lower bound of the normaliser.
            Default: 100.
        attn_backend (str): 'auto', 'eager' or 'triton': the eager
            composition or the fused op (:mod:`vitattn_mm.ops`; the same
            weights and outputs). Default: 'auto'.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """
    unsupported = NO_ATTENTION_WEIGHTS

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 qkv_bias: bool = True,
                 denominator_min: float = 100.,
                 attn_backend: str = 'auto',
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        check_heads(embed_dims, num_heads)
        self.attn_backend = check_backend(attn_backend)
        self.num_heads = num_heads
        self.denominator_min = denominator_min
        head_dims = embed_dims // num_heads
        self.temperature = nn.Parameter(
            torch.full((num_heads, 1, 1), head_dims**-0.5))
        self.qkv = nn.Linear(embed_dims, embed_dims * 3, bias=qkv_bias)
        self.proj = nn.Linear(embed_dims, embed_dims)

    def forward(self, x: torch.Tensor, hw_shape: Optional[Grid] = None,
                state=None) -> AttentionOutput:
        """``(B, N, C)`` -> same shape (the grid is not needed)."""
        attend = relu_linear_attention_op if uses_fused_op(
            self.attn_backend, x.device) else relu_linear_attention_eager
        out = attend(self.qkv(x), self.temperature, self.num_heads,
                     float(self.denominator_min))
        return self.proj(out), state

    @torch.no_grad()
    def query_attention(self, x: torch.Tensor, hw_shape: Grid,
                        index: int) -> QueryAttention:
        """``relu(q_i) relu(k)^T / max(sum, denominator_min)`` of query
        ``index``: its weights sum to less than 1 where the clamp acts."""
        B, N, C = x[:1].shape
        qkv = self.qkv(x[:1].float()).reshape(N, 3, self.num_heads, -1)
        q, k = qkv[:, 0].transpose(0, 1), qkv[:, 1].transpose(0, 1)
        sim = (F.relu(q[:, index:index + 1]) @ F.relu(k).transpose(-2, -1))
        sim = sim[:, 0]
        weights = sim / sim.sum(-1, keepdim=True).clamp(
            min=self.denominator_min)
        return QueryAttention(weights, tuple(hw_shape), q[:, index], k,
                              q.shape[-1]**-0.5)

    def extra_repr(self) -> str:
        return (f'num_heads={self.num_heads}, '
                f'denominator_min={self.denominator_min}')


class LocalConcentrationModule(BaseModule):
    """LCM: ``DWConv7x7 -> GELU -> BN -> DWConv7x7`` on the token map.

    Re-concentrates the dispersed linear-attention output on each token's
    neighbourhood (the paper's Eq. 5-7). No inner residual: the block adds
    it.

    Args:
        embed_dims (int): Channels C.
        kernel_size (int): Depthwise kernel. Default: 7.
        act_cfg (dict): Default: ``dict(type='GELU')``.
        norm_cfg (dict): Default: ``dict(type='BN')``.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """

    def __init__(self,
                 embed_dims: int,
                 kernel_size: int = 7,
                 act_cfg: dict = dict(type='GELU'),
                 norm_cfg: dict = dict(type='BN'),
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        padding = kernel_size // 2
        self.conv1 = nn.Conv2d(embed_dims, embed_dims, kernel_size,
                               padding=padding, groups=embed_dims)
        self.act = build_activation_layer(act_cfg)
        self.norm = build_norm_layer(norm_cfg, embed_dims)[1]
        self.conv2 = nn.Conv2d(embed_dims, embed_dims, kernel_size,
                               padding=padding, groups=embed_dims)

    def forward(self, x: torch.Tensor,
                hw_shape: Grid) -> torch.Tensor:
        x = nlc_to_nchw(x, hw_shape)
        x = self.conv2(self.norm(self.act(self.conv1(x))))
        return nchw_to_nlc(x)
