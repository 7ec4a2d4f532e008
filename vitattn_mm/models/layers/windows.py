"""Window partitioning shared by every windowed attention in the package.

Tokens are kept as ``(B, H*W, C)`` sequences with an explicit ``(H, W)``;
windows are ``(B * num_windows, window_h * window_w, C)``. Maps that are not
a multiple of the window are padded at the bottom/right and cropped back.
"""
from typing import Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.model.weight_init import trunc_normal_

from .graph_capture import is_capturing, padded_size


def to_2tuple_int(value) -> Tuple[int, int]:
    if isinstance(value, int):
        return value, value
    value = tuple(int(v) for v in value)
    assert len(value) == 2, f'expected an int or a pair, got {value}'
    return value


def pad_to_multiple(x: torch.Tensor, hw: Tuple[int, int],
                    window: Tuple[int, int]) -> Tuple[torch.Tensor, tuple]:
    """Pad ``(B, H*W, C)`` tokens so H and W are multiples of ``window``.

    While a graph is captured the (possibly zero) padding is always
    applied, so the graph does not depend on whether the size is a
    multiple of the window.

    Returns:
        tuple: The padded tokens as ``(B, Hp, Wp, C)`` and ``(Hp, Wp)``.
    """
    B, _, C = x.shape
    H, W = hw
    x = x.view(B, H, W, C)
    Hp, Wp = padded_size(H, window[0]), padded_size(W, window[1])
    if is_capturing() or Hp != H or Wp != W:
        x = F.pad(x, (0, 0, 0, Wp - W, 0, Hp - H))
    return x, (Hp, Wp)


def window_partition(x: torch.Tensor,
                     window: Tuple[int, int]) -> torch.Tensor:
    """``(B, Hp, Wp, C)`` -> ``(B * nW, wh * ww, C)``."""
    B, H, W, C = x.shape
    wh, ww = window
    x = x.view(B, H // wh, wh, W // ww, ww, C)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, wh * ww, C)


def window_reverse(windows: torch.Tensor, hw_padded: Tuple[int, int],
                   window: Tuple[int, int]) -> torch.Tensor:
    """``(B * nW, wh * ww, C)`` -> ``(B, Hp, Wp, C)``."""
    H, W = hw_padded
    wh, ww = window
    C = windows.shape[-1]
    x = windows.view(-1, H // wh, W // ww, wh, ww, C)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, H, W, C)


def crop_tokens(x: torch.Tensor, hw: Tuple[int, int]) -> torch.Tensor:
    """``(B, Hp, Wp, C)`` -> ``(B, H*W, C)``, dropping the padding."""
    H, W = hw
    B, _, _, C = x.shape
    return x[:, :H, :W, :].reshape(B, H * W, C)


def shifted_window_mask(hw_padded: Tuple[int, int], window: Tuple[int, int],
                        shift: Tuple[int, int],
                        device=None) -> torch.Tensor:
    """Additive mask for shifted windows (Swin), ``(nW, N, N)``.

    Tokens that were rolled in from the opposite border must not attend to
    the window's original tokens: those pairs get -100, which softmax turns
    into (numerically) zero weight.
    """
    H, W = hw_padded
    img_mask = torch.zeros(1, H, W, 1, device=device)
    cnt = 0
    for hs in (slice(0, -window[0]), slice(-window[0], -shift[0]),
               slice(-shift[0], None)):
        for ws in (slice(0, -window[1]), slice(-window[1], -shift[1]),
                   slice(-shift[1], None)):
            img_mask[:, hs, ws, :] = cnt
            cnt += 1
    mask_windows = window_partition(img_mask, window).squeeze(-1)
    mask = mask_windows.unsqueeze(1) - mask_windows.unsqueeze(2)
    return mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)


class RelativePositionBias(nn.Module):
    """Swin's learned relative position bias for a fixed window.

    The table has ``(2*wh-1) * (2*ww-1)`` rows per head, as in Swin
    checkpoints (``relative_position_bias_table``).

    Args:
        window (tuple[int, int]): Window size ``(wh, ww)``.
        num_heads (int): Number of attention heads.
    """

    def __init__(self, window: Tuple[int, int], num_heads: int):
        super().__init__()
        self.window = to_2tuple_int(window)
        wh, ww = self.window
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * wh - 1) * (2 * ww - 1), num_heads))
        coords = torch.stack(
            torch.meshgrid(torch.arange(wh), torch.arange(ww),
                           indexing='ij')).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0)
        rel[:, :, 0] += wh - 1
        rel[:, :, 1] += ww - 1
        index = rel[:, :, 0] * (2 * ww - 1) + rel[:, :, 1]
        # Derived from the window size: not part of checkpoints.
        self.register_buffer('relative_position_index', index,
                             persistent=False)
        trunc_normal_(self.relative_position_bias_table, std=0.02)

    def forward(self) -> torch.Tensor:
        """Returns the bias as ``(num_heads, N, N)``, N = wh * ww."""
        n = self.window[0] * self.window[1]
        bias = self.relative_position_bias_table[
            self.relative_position_index.view(-1)].view(n, n, -1)
        return bias.permute(2, 0, 1).contiguous()
