"""FLatten's focused linear attention.

Han et al., "FLatten Transformer: Vision Transformer using Focused Linear
Attention", ICCV 2023 (https://arxiv.org/abs/2308.00442), as the released
checkpoints of LeapLabTHU/FLatten-Transformer compute it.
"""
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import build_norm_layer

from ...registry import ATTENTIONS
from ...ops import (check_backend, focused_features,
                    focused_linear_attention_eager,
                    focused_linear_attention_op, uses_fused_op)
from ..layers.common import autocast_once, nchw_to_nlc, nlc_to_nchw
from ..layers.pos_embed import ResizablePosEmbed
from .base import (NO_ATTENTION_WEIGHTS, AttentionOutput, Grid,
                   QueryAttention, TokenAttention)
from .functional import check_heads, split_heads


@ATTENTIONS.register_module()
class FocusedLinearAttention(TokenAttention):
    """Focused linear attention with depthwise-conv rank restoration.

    As the released FLatten checkpoints compute it: a learned positional
    encoding is added to the keys only; queries and keys go through
    ``ReLU + 1e-6``, are divided by ``softplus(scale)`` and focused,
    ``f_p(x) = ||x|| / ||x**p|| * x**p``, over all C channels (before the
    heads are split). Per head, with n keys,

    ``out = (q @ ((k^T n^-0.5) @ (v n^-0.5))) / (q @ mean_n(k) + 1e-6)``,

    i.e. ``k^T v`` first (linear in the number of tokens); the mean / n^-0.5
    scaling keeps the products small. A depthwise ``kernel_size`` conv, one
    kernel shared by all heads, runs over ``v`` on the real (H, W) grid and
    is added before ``proj``.

    The feature map and the products run in fp32 with autocast off: under
    fp16, ``x**3`` and the norms over- and underflow. The projections and
    the conv keep the caller's precision.

    With ``sr_ratio > 1`` keys and values come from a strided conv + norm
    of the map (PVT's spatial reduction); ``v`` is upsampled back to (H, W)
    bilinearly for the depthwise conv.

    In windows (:class:`~vitattn_mm.models.attentions.WindowedAttention`,
    unshifted: a linear attention takes no mask) the grid is the window's,
    and so is the positional encoding.

    With ``lepe`` (FLatten-CSwin) CSwin's locally-enhanced positional
    encoding is added too: a 3x3 depthwise conv over all C channels of
    ``v`` on the (H, W) grid, its output added before ``proj`` beside the
    depthwise-conv branch.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads; C must be divisible by it.
        grid_size (tuple[int, int]): Token grid the positional encoding is
            learned on (the pretraining map). Other grids get it resized
            bilinearly.
        sr_ratio (int): Spatial-reduction ratio of keys and values.
            Default: 1 (every released model).
        qkv_bias (bool): Bias in the q / kv projections. Default: True.
        focusing_factor (float): p of the focusing function. Default: 3.
        kernel_size (int): Depthwise conv kernel. Default: 5.
        lepe (bool): Add CSwin's LePE (``lepe``: 3x3 depthwise conv of
            ``v``); needs ``sr_ratio=1``. Default: False.
        proj_drop (float): Dropout after ``proj``. Default: 0.
        norm_cfg (dict): Norm after the spatial reduction.
            Default: ``dict(type='LN')``.
        attn_backend (str): 'auto', 'eager' or 'triton': the eager
            composition or the fused op (:mod:`vitattn_mm.ops`; the same
            weights and outputs). Default: 'auto'.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """
    unsupported = NO_ATTENTION_WEIGHTS

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 grid_size: Grid,
                 sr_ratio: int = 1,
                 qkv_bias: bool = True,
                 focusing_factor: float = 3,
                 kernel_size: int = 5,
                 lepe: bool = False,
                 proj_drop: float = 0.,
                 norm_cfg: dict = dict(type='LN'),
                 attn_backend: str = 'auto',
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        self.head_dims = check_heads(embed_dims, num_heads)
        self.attn_backend = check_backend(attn_backend)
        if lepe and sr_ratio > 1:
            raise ValueError('lepe needs values on the query grid, so '
                             f'sr_ratio must be 1, got {sr_ratio}')
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.sr_ratio = sr_ratio
        self.focusing_factor = focusing_factor

        self.q = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
        self.kv = nn.Linear(embed_dims, embed_dims * 2, bias=qkv_bias)
        if sr_ratio > 1:
            self.sr = nn.Conv2d(embed_dims, embed_dims, sr_ratio, sr_ratio)
            self.norm = build_norm_layer(norm_cfg, embed_dims)[1]
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)
        self.dwc = nn.Conv2d(self.head_dims, self.head_dims, kernel_size,
                             padding=kernel_size // 2, groups=self.head_dims)
        self.lepe = nn.Conv2d(embed_dims, embed_dims, 3, padding=1,
                              groups=embed_dims) if lepe else None
        # softplus(0) = ln 2: the official initialisation.
        self.scale = nn.Parameter(torch.zeros(1, 1, embed_dims))
        key_grid = tuple(max(s // sr_ratio, 1) for s in grid_size)
        self.positional_encoding = ResizablePosEmbed(
            embed_dims, key_grid, init_std=0.)

    @classmethod
    def min_grid(cls, cfg: Optional[dict] = None) -> int:
        # The reduction is an unpadded strided conv, as the official one.
        return (cfg or {}).get('sr_ratio', 1)

    def feature_map(self, x: torch.Tensor) -> torch.Tensor:
        """The kernel of queries and keys (fp32): ``ReLU + 1e-6``, divided
        by ``softplus(scale)``, focused."""
        return focused_features(x, F.softplus(self.scale.float()),
                                self.focusing_factor)

    def forward(self, x: torch.Tensor, hw_shape: Grid,
                state=None) -> AttentionOutput:
        """``(B, H*W, C)`` tokens on an ``(H, W)`` grid -> same shape."""
        # The tokens reach two projections (or one and the reduction).
        x, x_keys = autocast_once(x)
        q = self.q(x)
        kv, kv_hw = self._keys_values(x_keys, hw_shape)
        # The depthwise conv runs on the values, on the query grid: taken
        # from the kv tokens as they are, unless they must be upsampled
        # (spatial reduction) or LePE reads the same map.
        v_map = None
        if self.sr_ratio > 1 or self.lepe is not None:
            v_map = nlc_to_nchw(kv[..., self.embed_dims:], kv_hw)
            if self.sr_ratio > 1:
                v_map = F.interpolate(v_map, size=hw_shape, mode='bilinear',
                                      align_corners=False)
        attend = focused_linear_attention_op if uses_fused_op(
            self.attn_backend, x.device) else focused_linear_attention_eager
        out = attend(q, kv, self.positional_encoding(kv_hw),
                     F.softplus(self.scale.float()), v_map, self.dwc.weight,
                     self.dwc.bias, list(hw_shape), self.num_heads,
                     float(self.focusing_factor))
        if self.lepe is not None:
            out = out + nchw_to_nlc(self.lepe(v_map))
        return self.proj_drop(self.proj(out)), state

    def _keys_values(self, x: torch.Tensor, hw_shape: Grid):
        """The ``(B, n, 2C)`` keys and values and their grid."""
        if self.sr_ratio > 1:
            reduced = self.sr(nlc_to_nchw(x, hw_shape))
            kv_hw = tuple(reduced.shape[-2:])
            return self.kv(self.norm(nchw_to_nlc(reduced))), kv_hw
        return self.kv(x), tuple(hw_shape)

    def _project(self, x: torch.Tensor, hw_shape: Grid):
        """q, k (positional encoding added), v and the key grid."""
        kv, kv_hw = self._keys_values(x, hw_shape)
        k, v = kv.chunk(2, dim=-1)
        return self.q(x), k + self.positional_encoding(kv_hw), v, kv_hw

    @torch.no_grad()
    def query_attention(self, x: torch.Tensor, hw_shape: Grid,
                        index: int) -> QueryAttention:
        """Focused linear weights ``phi(q_i) phi(k)^T / sum`` of query
        ``index`` over the whole map (the depthwise-conv branch is not an
        attention distribution and is left out)."""
        q, k, _, kv_hw = self._project(x[:1], hw_shape)
        qf, kf = (split_heads(self.feature_map(t), self.num_heads)[0]
                  for t in (q, k))
        sim = (qf[:, index:index + 1] @ kf.transpose(-2, -1))[:, 0]
        q, k = (split_heads(t.float(), self.num_heads)[0] for t in (q, k))
        return QueryAttention(sim / sim.sum(-1, keepdim=True), kv_hw,
                              q[:, index], k, self.head_dims**-0.5)

    def extra_repr(self) -> str:
        return (f'embed_dims={self.embed_dims}, num_heads={self.num_heads}, '
                f'sr_ratio={self.sr_ratio}, '
                f'focusing_factor={self.focusing_factor}, '
                f'lepe={self.lepe is not None}')
