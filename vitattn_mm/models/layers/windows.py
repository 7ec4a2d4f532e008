"""Windows: the one place tokens are cut into (shifted) windows, and Swin's
relative position bias.

Tokens are kept as ``(B, H*W, C)`` sequences with an explicit ``(H, W)``;
windows are ``(B * num_windows, window_h * window_w, C)``, image-major. Maps
that are not a multiple of the window are padded at the bottom/right with
zero tokens, which take part in the attention as in Swin (mmdet's and
mmpretrain's ``ShiftWindowMSA``), and cropped back. The padding and the
crop are always applied (possibly by zero): the size arithmetic stays
symbolic when a graph is captured (ONNX export, ``torch.compile``), so one
graph serves every input size.
"""
from typing import Optional, Tuple

import torch
import torch.nn as nn
from mmengine.model.weight_init import trunc_normal_

from .common import to_2tuple_int
from .padding import pad, padded_size

Grid = Tuple[int, int]


def pad_to_multiple(x: torch.Tensor, hw: Grid,
                    window: Tuple[Optional[int], Optional[int]]
                    ) -> Tuple[torch.Tensor, tuple]:
    """Pad ``(B, H*W, C)`` tokens so H and W are multiples of ``window``.

    A window side of None spans the whole side (CSwin's stripes) and needs
    no padding.

    Returns:
        tuple: The padded tokens as ``(B, Hp, Wp, C)`` and ``(Hp, Wp)``.
    """
    B, _, C = x.shape
    H, W = hw
    Hp = H if window[0] is None else padded_size(H, window[0])
    Wp = W if window[1] is None else padded_size(W, window[1])
    x = pad(x.view(B, H, W, C), (0, 0, 0, Wp - W, 0, Hp - H))
    return x, (Hp, Wp)


def window_partition(x: torch.Tensor, window: Grid) -> torch.Tensor:
    """``(B, Hp, Wp, C)`` -> ``(B * nW, wh * ww, C)``."""
    B, H, W, C = x.shape
    wh, ww = window
    x = x.view(B, H // wh, wh, W // ww, ww, C)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, wh * ww, C)


def window_reverse(windows: torch.Tensor, hw_padded: Grid,
                   window: Grid) -> torch.Tensor:
    """``(B * nW, wh * ww, C)`` -> ``(B, Hp, Wp, C)``."""
    H, W = hw_padded
    wh, ww = window
    C = windows.shape[-1]
    x = windows.view(-1, H // wh, W // ww, wh, ww, C)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, H, W, C)


def crop_tokens(x: torch.Tensor, hw: Grid) -> torch.Tensor:
    """``(B, Hp, Wp, C)`` -> ``(B, H*W, C)``, dropping the padding.

    A negative pad crops into a new tensor: a slice would be a view whose
    rows are contiguous only when nothing was cropped, and reshaping it
    would make a compiled graph guard (and recompile) on that.
    """
    H, W = hw
    B, Hp, Wp, C = x.shape
    x = pad(x, (0, 0, 0, W - Wp, 0, H - Hp))
    return x.reshape(B, H * W, C)


def shifted_window_mask(hw_padded: Grid, window: Grid, shift: Grid,
                        device=None) -> torch.Tensor:
    """Additive mask for shifted windows (Swin), ``(nW, N, N)``.

    Tokens that were rolled in from the opposite border must not attend to
    the window's original tokens: those pairs get -100, which softmax turns
    into (numerically) zero weight. As mmpretrain's
    ``ShiftWindowMSA.get_attn_mask``, which numbers the three bands of
    each axis and fills a map region by region.

    Every shifted block builds it each step, so it is built in a few ops
    (12, where filling the nine regions one by one took 25): the band of
    each row and of each column is the count of band starts at or before
    it, a token's region is ``3 * row band + column band``, written
    straight in the windows' order (no partition copy), and the mask
    compares regions.
    """
    (H, W), (wh, ww) = hw_padded, window
    if not all(0 < s < w for s, w in zip(shift, window)):
        raise ValueError(
            f'a shift mask needs a shift in [1, window) on each axis, got '
            f'shift {tuple(shift)} for window {tuple(window)} (without a '
            'shift there is no mask)')
    rows = _shift_bands(H, wh, shift[0], device).view(H // wh, 1, wh, 1)
    cols = _shift_bands(W, ww, shift[1], device).view(1, W // ww, 1, ww)
    regions = torch.add(cols, rows, alpha=3).view(-1, wh * ww)
    apart = regions[:, None, :] != regions[:, :, None]
    # Filled into zeros: a product of the comparison with -100 would give
    # -0.0 where it is false; torch.where makes two scalar tensors first.
    return torch.zeros(apart.shape, device=device).masked_fill_(apart, -100.)


def _shift_bands(size: int, window: int, shift: int, device) -> torch.Tensor:
    """Band of each position along an axis of ``size`` after a cyclic
    shift: 0 before ``size - window``, 1 up to ``size - shift``, 2 from
    there (the rolled-in border)."""
    starts = torch.arange(size - window, size - shift + 1, window - shift,
                          device=device)
    return (torch.arange(size, device=device)[:, None] >= starts).sum(-1)


def relative_position_index(window: Grid) -> torch.Tensor:
    """Swin's ``(N, N)`` index into a ``(2*wh-1) * (2*ww-1)`` bias table,
    N = wh * ww."""
    wh, ww = window
    coords = torch.stack(
        torch.meshgrid(torch.arange(wh), torch.arange(ww),
                       indexing='ij')).flatten(1)
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0)
    rel[:, :, 0] += wh - 1
    rel[:, :, 1] += ww - 1
    return rel[:, :, 0] * (2 * ww - 1) + rel[:, :, 1]


def add_relative_position_bias(module: nn.Module, window: Grid,
                               num_heads: int, persistent: bool) -> None:
    """Give ``module`` Swin's learned relative position bias for
    ``window``: the table ``relative_position_bias_table`` (``(2*wh-1) *
    (2*ww-1)`` rows per head, as in Swin checkpoints) and the index
    ``relative_position_index`` (saved in the state dict if
    ``persistent``, as mmdet's and mmpretrain's ``WindowMSA`` save it).
    Read it with :func:`relative_position_bias`."""
    wh, ww = window
    module.relative_position_bias_table = nn.Parameter(
        torch.zeros((2 * wh - 1) * (2 * ww - 1), num_heads))
    trunc_normal_(module.relative_position_bias_table, std=0.02)
    module.register_buffer('relative_position_index',
                           relative_position_index(window),
                           persistent=persistent)


def relative_position_bias(module: nn.Module) -> torch.Tensor:
    """The ``(heads, N, N)`` bias of a module given one by
    :func:`add_relative_position_bias`."""
    index = module.relative_position_index
    n = index.shape[0]
    table = module.relative_position_bias_table
    return table[index.reshape(-1)].view(n, n, -1).permute(2, 0,
                                                           1).contiguous()


class RelativePositionBias(nn.Module):
    """Swin's relative position bias as a module of its own, for attentions
    that add it when they run in a window (MSF's, Less-Attention's VA
    layers); the index is derived from the window and not saved.

    Args:
        window (tuple[int, int]): Window size ``(wh, ww)``.
        num_heads (int): Number of attention heads.
    """

    def __init__(self, window: Grid, num_heads: int):
        super().__init__()
        self.window = to_2tuple_int(window)
        add_relative_position_bias(self, self.window, num_heads,
                                   persistent=False)

    def forward(self) -> torch.Tensor:
        """The bias as ``(num_heads, N, N)``, N = wh * ww."""
        return relative_position_bias(self)
