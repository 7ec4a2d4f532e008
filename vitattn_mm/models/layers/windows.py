"""Windows: the one place tokens are cut into (shifted) windows.

Tokens are kept as ``(B, H*W, C)`` sequences with an explicit ``(H, W)``;
windows are ``(B * num_windows, window_h * window_w, C)``, image-major. Maps
that are not a multiple of the window are padded at the bottom/right with
zero tokens, which take part in the attention as in Swin (mmdet's and
mmpretrain's ``ShiftWindowMSA``), and cropped back.

:class:`WindowedAttention` runs any registered attention in such windows:
Swin's, L2ViT's local windows, Less-Attention's window VA / LA layers,
windowed FLatten or MSF. Its size arithmetic stays symbolic while a graph
is captured (ONNX export, ``torch.compile``).
"""
from typing import Optional, Tuple, Union

import torch
import torch.nn as nn
from mmengine.model.weight_init import trunc_normal_

from ...registry import ATTENTIONS
from .attention import (AttentionState, Grid, QueryAttention, TokenAttention,
                        attention_class, build_attention)
from .padding import is_capturing, padded_size


def to_2tuple_int(value) -> Tuple[int, int]:
    if isinstance(value, int):
        return value, value
    value = tuple(int(v) for v in value)
    if len(value) != 2:
        raise ValueError(f'expected an int or a pair, got {value}')
    return value


def pad_to_multiple(x: torch.Tensor, hw: Grid,
                    window: Grid) -> Tuple[torch.Tensor, tuple]:
    """Pad ``(B, H*W, C)`` tokens so H and W are multiples of ``window``.

    A window side of None spans the whole side (CSwin's stripes): it needs
    no padding, and none is written into a captured graph's arithmetic.
    While a graph is captured the (possibly zero) padding is always
    applied, so the graph does not depend on whether the size is a
    multiple of the window.

    Returns:
        tuple: The padded tokens as ``(B, Hp, Wp, C)`` and ``(Hp, Wp)``.
    """
    B, _, C = x.shape
    H, W = hw
    x = x.view(B, H, W, C)
    Hp = H if window[0] is None else padded_size(H, window[0])
    Wp = W if window[1] is None else padded_size(W, window[1])
    if is_capturing() or Hp != H or Wp != W:
        x = torch.nn.functional.pad(x, (0, 0, 0, Wp - W, 0, Hp - H))
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
    """``(B, Hp, Wp, C)`` -> ``(B, H*W, C)``, dropping the padding."""
    H, W = hw
    B, Hp, Wp, C = x.shape
    if torch.compiler.is_compiling():
        # A sliced map is a view whose rows are contiguous only if nothing
        # was cropped: reshaping it would guard on that and recompile for
        # maps that were (not) padded. A negative pad crops into a new
        # tensor.
        x = torch.nn.functional.pad(x, (0, 0, 0, W - Wp, 0, H - Hp))
        return x.reshape(B, H * W, C)
    return x[:, :H, :W, :].reshape(B, H * W, C)


def shifted_window_mask(hw_padded: Grid, window: Grid, shift: Grid,
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


def window_mask_bias(mask: Optional[torch.Tensor],
                     bias: Optional[torch.Tensor], *tensors: torch.Tensor):
    """Prepare a batch of windows for one attention call with Swin's shift
    mask: ``(B*nW, ...)`` tensors are viewed as ``(B, nW, ...)`` and the
    ``(nW, N, N)`` mask is added to ``bias`` (``(heads, N, N)`` or None)
    as ``(nW, heads | 1, N, N)``, so each window gets its mask without a
    copy per image. Without a mask, ``bias`` and the tensors pass through.

    Returns:
        tuple: ``(bias, *tensors)``; undo the view with ``flatten(0, 1)``.
    """
    if mask is None:
        return (bias, *tensors)
    mask = mask[:, None]
    bias = mask if bias is None else bias + mask
    return (bias, *(t.unflatten(0, (-1, mask.shape[0])) for t in tensors))


def gather_relative_position_bias(table: torch.Tensor,
                                  index: torch.Tensor) -> torch.Tensor:
    """``(heads, N, N)`` bias from a ``(L, heads)`` table and an ``(N, N)``
    index."""
    n = index.shape[0]
    return table[index.reshape(-1)].view(n, n, -1).permute(2, 0,
                                                           1).contiguous()


class RelativePositionBias(nn.Module):
    """Swin's learned relative position bias for a fixed window.

    The table has ``(2*wh-1) * (2*ww-1)`` rows per head, as in Swin
    checkpoints (``relative_position_bias_table``); the index is derived
    from the window and not saved.

    Args:
        window (tuple[int, int]): Window size ``(wh, ww)``.
        num_heads (int): Number of attention heads.
    """

    def __init__(self, window: Grid, num_heads: int):
        super().__init__()
        self.window = to_2tuple_int(window)
        wh, ww = self.window
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * wh - 1) * (2 * ww - 1), num_heads))
        self.register_buffer('relative_position_index',
                             relative_position_index(self.window),
                             persistent=False)
        trunc_normal_(self.relative_position_bias_table, std=0.02)

    def forward(self) -> torch.Tensor:
        """The bias as ``(num_heads, N, N)``, N = wh * ww."""
        return gather_relative_position_bias(self.relative_position_bias_table,
                                             self.relative_position_index)


@ATTENTIONS.register_module(name='ShiftWindowMSA')
@ATTENTIONS.register_module()
class WindowedAttention(TokenAttention):
    """Any registered attention, run in (shifted) windows.

    The map is padded to a multiple of the window, rolled by ``shift_size``
    tokens up and left when shifted, cut into windows, and each window is
    given to the inner attention (``w_msa``, Swin's name) as a map of its
    own; the result is put back, rolled back and cropped. Shifted windows
    hold tokens rolled in from the opposite border: a ``takes_mask``
    attention gets Swin's mask that keeps them apart; any other inner
    attention is refused a shift. A stateful inner attention's state is
    passed through, told how many windows each image was cut into.

    Registered as ``WindowedAttention`` and, for Swin configs, as
    ``ShiftWindowMSA`` (mmpretrain's name for Swin's wrapper).

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Heads of the inner attention.
        window_size (int | tuple[int, int]): Window. Default: 7.
        shift (bool): Shift by half a window (Swin's odd blocks).
            Default: False.
        shift_size (int, optional): Shift in tokens (mmpretrain's name;
            overrides ``shift``). Default: None.
        pad_small_map (bool): Maps smaller than the window are padded to
            one window and shifted like any other (mmdet's Swin; dense
            prediction). False follows the original Swin classifiers: a map
            of exactly one window is not shifted, and a smaller one raises.
            Default: True.
        window_msa (str | type): The inner attention, a registered name.
            Default: 'WindowMSA'.
        **kwargs: The inner attention's own arguments (``qkv_bias``,
            ``attn_drop``, ...). It also gets the window as ``window_size``
            and ``grid_size`` if its constructor takes them.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 window_size: Union[int, Grid] = 7,
                 shift: bool = False,
                 shift_size: Optional[int] = None,
                 pad_small_map: bool = True,
                 window_msa: Union[str, type] = 'WindowMSA',
                 **kwargs):
        super().__init__()
        self.window_size = to_2tuple_int(window_size)
        if shift_size is None:
            shift_size = min(self.window_size) // 2 if shift else 0
        if not 0 <= shift_size < min(self.window_size):
            raise ValueError(f'shift_size {shift_size} must be in [0, '
                             f'{min(self.window_size)})')
        self.shift_size = shift_size
        self.pad_small_map = pad_small_map
        self.w_msa = build_attention(
            dict(kwargs, type=attention_class(window_msa)),
            context=dict(window_size=self.window_size,
                         grid_size=self.window_size),
            embed_dims=embed_dims,
            num_heads=num_heads)
        if shift_size and not self.w_msa.takes_mask:
            raise ValueError(
                f'{type(self.w_msa).__name__} cannot take the mask of '
                'shifted windows (it is no softmax attention): build it '
                'with shift=False')
        self.stateful = self.w_msa.stateful

    def migrate_keys(self, state_dict: dict, prefix: str = '') -> None:
        """The inner attention's keys saved without the wrapper (windowed
        attentions of earlier versions: ``attn.qkv``) move under
        ``w_msa.``; the wrapper has no parameters of its own."""
        for key in [k for k in state_dict if k.startswith(prefix)]:
            if not key.startswith(prefix + 'w_msa.'):
                state_dict[prefix + 'w_msa.' + key[len(prefix):]] = \
                    state_dict.pop(key)

    def _layout(self, hw_shape: Grid) -> int:
        """The shift for a map of ``hw_shape`` (Swin's small-map rules)."""
        H, W = hw_shape
        window = min(self.window_size)
        if min(H, W) == window and not self.pad_small_map:
            # The original classifiers do not shift a map of one window.
            return 0
        if min(H, W) < window and not self.pad_small_map:
            raise ValueError(
                f'the map ({H}, {W}) is smaller than the window '
                f'({window}); set pad_small_map=True or a smaller window')
        return self.shift_size

    def to_windows(self, x: torch.Tensor, hw_shape: Grid):
        """``(B, H*W, C)`` -> windows ``(B*nW, wh*ww, C)``, the padded grid,
        the shift and its ``(nW, N, N)`` mask (None without shift)."""
        shift = self._layout(hw_shape)
        x, padded = pad_to_multiple(x, hw_shape, self.window_size)
        mask = None
        if shift:
            x = torch.roll(x, (-shift, -shift), dims=(1, 2))
            mask = shifted_window_mask(padded, self.window_size,
                                       (shift, shift), x.device)
        return window_partition(x, self.window_size), padded, shift, mask

    def from_windows(self, windows: torch.Tensor, padded: Grid, shift: int,
                     hw_shape: Grid) -> torch.Tensor:
        x = window_reverse(windows, padded, self.window_size)
        if shift:
            x = torch.roll(x, (shift, shift), dims=(1, 2))
        return crop_tokens(x, hw_shape)

    def forward(self,
                x: torch.Tensor,
                hw_shape: Grid,
                state: Optional[AttentionState] = None):
        windows, padded, shift, mask = self.to_windows(x, hw_shape)
        extra = dict(mask=mask) if mask is not None else {}
        if self.stateful:
            out, state = self.w_msa(windows, self.window_size, state, **extra)
            state = state.in_windows(windows.shape[0] // x.shape[0])
            return self.from_windows(out, padded, shift, hw_shape), state
        out = self.w_msa(windows, self.window_size, **extra)
        return self.from_windows(out, padded, shift, hw_shape)

    @torch.no_grad()
    def query_attention(self, x: torch.Tensor, hw_shape: Grid, index: int,
                        *state) -> QueryAttention:
        """The inner attention's weights over the query's window (shift and
        mask included), placed on the whole map; zero elsewhere."""
        if state:
            raise ValueError('draw a windowed stateful attention through '
                             'its inner module (w_msa)')
        windows, padded, shift, mask = self.to_windows(x[:1], hw_shape)
        row, col = divmod(index, hw_shape[1])
        # The query's place on the padded, rolled grid.
        pr, pc = (row - shift) % padded[0], (col - shift) % padded[1]
        wh, ww = self.window_size
        window = (pr // wh) * (padded[1] // ww) + pc // ww
        inner = self.w_msa.query_attention(
            windows[window:window + 1], self.window_size,
            (pr % wh) * ww + pc % ww)
        weights = inner.weights
        if mask is not None:
            blocked = mask[window, (pr % wh) * ww + pc % ww] < 0
            weights = weights.masked_fill(blocked, 0)
            weights = weights / weights.sum(-1, keepdim=True)
        # Scatter the window's keys back onto the (unrolled, cropped) map.
        rows = (torch.arange(wh).repeat_interleave(ww) +
                (pr // wh) * wh + shift) % padded[0]
        cols = (torch.arange(ww).repeat(wh) + (pc // ww) * ww +
                shift) % padded[1]
        inside = (rows < hw_shape[0]) & (cols < hw_shape[1])
        full = weights.new_zeros(weights.shape[0], *hw_shape)
        full[:, rows[inside], cols[inside]] = weights[:, inside]
        keys = inner.keys.new_zeros(*inner.keys.shape[:1],
                                    hw_shape[0] * hw_shape[1],
                                    inner.keys.shape[-1])
        keys[:, rows[inside] * hw_shape[1] + cols[inside]] = \
            inner.keys[:, inside]
        return QueryAttention(full.flatten(1), tuple(hw_shape), inner.query,
                              keys, inner.scale)

    def extra_repr(self) -> str:
        return (f'window_size={self.window_size}, '
                f'shift_size={self.shift_size}, '
                f'pad_small_map={self.pad_small_map}')
