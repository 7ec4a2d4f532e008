"""Positional encodings: learned absolute tables that follow the running
grid, and the conditional (convolutional) one."""
import math
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.logging import MMLogger
from mmengine.model import BaseModule
from mmengine.model.weight_init import trunc_normal_

from .common import full_precision
from .size_aware import capturing


def resize_pos_embed(pos_embed: torch.Tensor,
                     src_hw: Tuple[int, int],
                     dst_hw: Tuple[int, int],
                     mode: str = 'bilinear',
                     num_extra_tokens: int = 0) -> torch.Tensor:
    """Resize a ``(1, E + H*W, C)`` positional embedding to another grid
    (the ``E`` leading rows, e.g. a class token's, are kept as they are).

    The size-aware primitive of position tables (see :mod:`.size_aware`):
    eagerly, a table already on ``dst_hw`` is returned as it is; while a
    graph is captured the resize is always part of the graph (at the source
    size it is the identity), so the graph serves every input size.
    Interpolation runs in fp32 (bicubic is fp32-only on several devices)
    and the result is cast back, so it is safe under autocast.

    Args:
        pos_embed (Tensor): Embedding of shape ``(1, E + src_h * src_w, C)``.
        src_hw (tuple[int, int]): Grid the embedding was learned on.
        dst_hw (tuple[int, int]): Grid to resize to.
        mode (str): ``F.interpolate`` mode. Default: 'bilinear'.
        num_extra_tokens (int): Leading rows ``E`` that belong to no grid
            position. Default: 0.

    Returns:
        Tensor: Embedding of shape ``(1, E + dst_h * dst_w, C)``.
    """
    src_hw, dst_hw = tuple(src_hw), tuple(dst_hw)
    if not capturing() and src_hw == dst_hw:
        return pos_embed
    _, length, channels = pos_embed.shape
    if length != num_extra_tokens + src_hw[0] * src_hw[1]:
        raise ValueError(f'positional embedding has {length} tokens, which '
                         f'is not {num_extra_tokens} extra tokens and a '
                         f'{src_hw[0]}x{src_hw[1]} grid')
    extra = pos_embed[:, :num_extra_tokens]
    grid = pos_embed[:, num_extra_tokens:].reshape(1, *src_hw, channels)
    grid = grid.permute(0, 3, 1, 2)
    grid = F.interpolate(grid.float(), size=dst_hw, mode=mode,
                         align_corners=False)
    grid = grid.flatten(2).transpose(1, 2).to(pos_embed.dtype)
    return torch.cat([extra, grid], dim=1) if num_extra_tokens else grid


def resize_loaded_pos_embed(weight: torch.Tensor, grid_hw: Tuple[int, int],
                            mode: str = 'bilinear',
                            num_extra_tokens: int = 0,
                            name: str = 'positional embedding'
                            ) -> torch.Tensor:
    """A checkpoint's ``(1, E + N, C)`` table resized to ``grid_hw``
    (unchanged when it is there already).

    What loading does to every position table (see
    :meth:`~vitattn_mm.models.backbones.StagedBackbone.adapt_state_dict`),
    so a file written at one input size loads into a model built for
    another through any loader. The file keeps no grid, only ``N``: it is
    taken as square, else as of the model's aspect ratio (a table learned
    at 384x512 loads at 768x1024); a table that is neither is refused by
    name.
    """
    length = weight.shape[-2] - num_extra_tokens
    if weight.dim() == 3 and length == grid_hw[0] * grid_hw[1]:
        return weight
    source = _source_grid(length, grid_hw) if weight.dim() == 3 else None
    if source is None:
        raise ValueError(
            f'cannot resize the {name} of shape {tuple(weight.shape)} to the '
            f'{grid_hw[0]}x{grid_hw[1]} grid: expected (1, '
            f'{num_extra_tokens} + N, C) with N = h * w for a square grid or '
            f'one of the model\'s aspect ratio, and {length} is neither. '
            'Resize it to the model\'s grid before loading.')
    MMLogger.get_current_instance().info(
        f'Resize the {name} from {source[0]}x{source[1]} to '
        f'{grid_hw[0]}x{grid_hw[1]}.')
    return resize_pos_embed(weight, source, grid_hw, mode, num_extra_tokens)


def _source_grid(length: int, grid_hw: Tuple[int, int]):
    """The grid ``length`` positions were learned on: square, else of
    ``grid_hw``'s aspect ratio; None if neither has integer sides."""
    side = math.isqrt(max(length, 0))
    if side * side == length and length > 0:
        return side, side
    H, W = grid_hw
    h = math.isqrt(length * H // W) if W else 0
    for height in (h, h + 1):
        if height and length % height == 0 and \
                height * W == (length // height) * H:
            return height, length // height
    return None


class ResizablePosEmbed(nn.Module):
    """A learned ``(1, N, C)`` positional embedding on a pretraining grid.

    ``forward(hw)`` returns it resized to the running ``(H, W)`` grid, so the
    module serves any input size. A checkpoint holding the table on another
    (square) grid is resized when the backbone loads it, whichever loader is
    used.

    Args:
        channels (int): Embedding channels C.
        grid_hw (tuple[int, int]): Pretraining grid ``(H, W)``.
        mode (str): Interpolation mode for resizing. Default: 'bilinear'.
        init_std (float): Std of the truncated-normal init; 0 initialises to
            zeros (the FLatten convention). Default: 0.02.
        num_extra_tokens (int): Leading rows for tokens outside the grid (a
            ViT's class token), never resized. Default: 0.
    """

    def __init__(self,
                 channels: int,
                 grid_hw: Tuple[int, int],
                 mode: str = 'bilinear',
                 init_std: float = 0.02,
                 num_extra_tokens: int = 0):
        super().__init__()
        self.grid_hw = tuple(grid_hw)
        self.mode = mode
        self.init_std = init_std
        self.num_extra_tokens = num_extra_tokens
        self.weight = nn.Parameter(
            torch.zeros(1, num_extra_tokens + self.grid_hw[0] *
                        self.grid_hw[1], channels))
        self.reset_parameters()

    def reset_parameters(self):
        if self.init_std > 0:
            trunc_normal_(self.weight, std=self.init_std)
        else:
            nn.init.zeros_(self.weight)

    def forward(self, hw: Tuple[int, int]) -> torch.Tensor:
        return resize_pos_embed(self.weight, self.grid_hw, hw, self.mode,
                                self.num_extra_tokens)

    def extra_repr(self) -> str:
        return (f'channels={self.weight.shape[-1]}, grid_hw={self.grid_hw}, '
                f'mode={self.mode!r}, '
                f'num_extra_tokens={self.num_extra_tokens}')


def sincos_pos_embed_2d(hw: Tuple[int, int],
                        channels: int,
                        temperature: float = 10000.,
                        device=None) -> torch.Tensor:
    """Fixed 2-D sine-cosine position embedding of Simple ViT, ``(H*W, C)``.

    A quarter of the channels each hold ``sin`` and ``cos`` of the column
    and of the row index at frequencies ``temperature^(-i / (C/4 - 1))``, in
    the order (sin x, cos x, sin y, cos y), as the official model computes
    it.
    """
    if channels % 4:
        raise ValueError(f'sin-cos position embedding needs channels '
                         f'divisible by 4, got {channels}')
    rows, cols = torch.meshgrid(
        torch.arange(hw[0], device=device, dtype=torch.float32),
        torch.arange(hw[1], device=device, dtype=torch.float32),
        indexing='ij')
    quarter = channels // 4
    freqs = temperature**-(
        torch.arange(quarter, device=device, dtype=torch.float32) /
        max(quarter - 1, 1))
    x = cols.flatten()[:, None] * freqs
    y = rows.flatten()[:, None] * freqs
    return torch.cat([x.sin(), x.cos(), y.sin(), y.cos()], dim=1)


class ConditionalPositionEncoding(BaseModule):
    """Conditional positional encoding (Chu et al., CPVT): a 3x3 depthwise
    conv of the token map, added to it (``stride=1``) or replacing it.

    Keys as mmpretrain's ``ConditionalPositionEncoding`` (``proj``), so
    either's weights load into the other.

    Args:
        in_channels (int): Channels of the tokens.
        embed_dims (int): Channels out (the groups). Default: 768.
        stride (int): Stride of the conv; 1 adds the map. Default: 1.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """

    def __init__(self,
                 in_channels: int,
                 embed_dims: int = 768,
                 stride: int = 1,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        self.proj = nn.Conv2d(in_channels, embed_dims, 3, stride=stride,
                              padding=1, groups=embed_dims)
        self.stride = stride
        if stride == 1:
            # The identity as a depthwise tap: one at each kernel's centre
            # (derived, not saved).
            tap = torch.zeros_like(self.proj.weight)
            tap[:, :, 1, 1] = 1.
            self.register_buffer('identity_tap', tap, persistent=False)

    def forward(self, x: torch.Tensor,
                hw_shape: Tuple[int, int]) -> torch.Tensor:
        """``(B, H*W, C)`` tokens on ``hw_shape`` -> tokens."""
        B, _, C = x.shape
        feat = x.transpose(1, 2).reshape(B, C, *hw_shape)
        if self.stride != 1:
            return self.proj(feat).flatten(2).transpose(1, 2)
        weight = self.proj.weight
        if feat.dtype != weight.dtype or weight.dtype not in (torch.float32,
                                                              torch.float64):
            return (self.proj(feat) + feat).flatten(2).transpose(1, 2)
        # Tokens in the weights' fp32 (the residual stream, also under
        # autocast) are convolved in it: autocast's bf16 copy for the conv
        # and the fp32 sum after it were a pass each, and their gradients,
        # for a depthwise conv that moves no more than its map. The map
        # plus its conv is the conv with the identity in its centre taps:
        # one pass each way, the sum's and its gradient's gone, the same
        # to an ulp (not so in half precision, which would round 1 + w).
        with full_precision(feat):
            out = F.conv2d(feat, weight + self.identity_tap, self.proj.bias,
                           padding=1, groups=self.proj.groups)
        return out.flatten(2).transpose(1, 2)
