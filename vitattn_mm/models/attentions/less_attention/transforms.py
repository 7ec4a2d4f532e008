"""The Less-Attention transforms: how an LA layer turns the previous
layer's attention logits into its own (paper Eq. 5)."""
import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.model import BaseModule

from ....ops import (check_backend, score_conv_eager, score_conv_op,
                     uses_fused_op)
from ....ops.score_conv import FOLDED_MIX_MAX_HEADS
from ...layers.size_aware import token_pointwise_conv
from ..base import Grid


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
        attn_backend (str): 'auto', 'eager' or 'triton': the two depthwise
            convs per head eagerly, or as one fused op
            (:func:`~vitattn_mm.ops.score_conv_op`, the head mix folded
            into its query conv up to ``FOLDED_MIX_MAX_HEADS`` heads).
            Default: 'auto'.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """

    def __init__(self,
                 num_heads: int,
                 kernel_size: int = 3,
                 attn_backend: str = 'auto',
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        self.attn_backend = check_backend(attn_backend)
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
        weights = (self.key_conv.weight, self.query_conv.weight,
                   list(query_hw), list(key_hw))
        if not uses_fused_op(self.attn_backend, logits.device):
            return score_conv_eager(logits, *weights,
                                    head_mix=self.head_mix.weight)
        if logits.shape[1] <= FOLDED_MIX_MAX_HEADS:  # as the eager convs
            return score_conv_op(logits, *weights, self.head_mix.weight)
        # (B, heads, N_q, N_k) is NCHW with the heads as channels.
        return token_pointwise_conv(score_conv_op(logits, *weights),
                                    self.head_mix.weight)


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
