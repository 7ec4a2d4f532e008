"""Patch embeddings beyond mmcv's convolutional ``PatchEmbed``."""
from typing import Tuple

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmengine.model import BaseModule

from .padding import pad, padded_size


class PixelNormPatchEmbed(BaseModule):
    """Simple ViT's patch embedding: LayerNorm over each patch's pixels,
    a linear projection, LayerNorm again.

    Pixels are flattened in (row, column, channel) order within a patch, as
    in the official model. Inputs whose sides are not multiples of the patch
    size are zero-padded at the bottom / right (mmcv's 'corner' padding).

    Args:
        in_channels (int): Image channels.
        embed_dims (int): Token channels.
        patch_size (int): Patch side. Default: 16.
        norm_cfg (dict): Both norms. Default: ``dict(type='LN')``.
    """

    def __init__(self,
                 in_channels: int,
                 embed_dims: int,
                 patch_size: int = 16,
                 norm_cfg: dict = dict(type='LN')):
        super().__init__()
        self.patch_size = patch_size
        patch_dims = in_channels * patch_size**2
        self.pixel_norm = build_norm_layer(norm_cfg, patch_dims)[1]
        self.projection = nn.Linear(patch_dims, embed_dims)
        self.norm = build_norm_layer(norm_cfg, embed_dims)[1]

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, tuple]:
        """``(B, C, H, W)`` -> ``(B, h*w, embed_dims)`` and ``(h, w)``."""
        p = self.patch_size
        B, C, H, W = x.shape
        H, W = padded_size(H, p), padded_size(W, p)
        x = pad(x, (0, W - x.shape[-1], 0, H - x.shape[-2]))
        h, w = H // p, W // p
        x = x.view(B, C, h, p, w, p).permute(0, 2, 4, 3, 5, 1)
        x = x.reshape(B, h * w, p * p * C)
        return self.norm(self.projection(self.pixel_norm(x))), (h, w)
