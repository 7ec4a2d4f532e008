"""Any registered attention, run in (shifted) windows."""
from typing import Optional, Union

import torch

from ...registry import ATTENTIONS
from ..layers.common import to_2tuple_int
from ..layers.windows import (crop_tokens, pad_to_multiple,
                              shifted_window_mask, window_partition,
                              window_reverse)
from .base import (AttentionOutput, AttentionState, Grid, QueryAttention,
                   TokenAttention, argument_value, attention_class,
                   build_attention)


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
    attention (a linear one, or one whose keys are reduced) is refused a
    shift by name when built (:meth:`can_wrap`). The state is passed
    through the inner attention, told how many windows each image was cut
    into.

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
        inner = attention_class(window_msa)
        if shift_size and not self.can_wrap(inner, True, kwargs):
            raise ValueError(
                f'{inner.__name__} cannot run in shifted windows: '
                f"{inner.refusal('takes_mask', kwargs)}; build it with "
                'shift=False')
        self.shift_size = shift_size
        self.pad_small_map = pad_small_map
        self.w_msa = build_attention(
            dict(kwargs, type=inner),
            context=dict(window_size=self.window_size,
                         grid_size=self.window_size),
            embed_dims=embed_dims,
            num_heads=num_heads)

    @classmethod
    def refusal(cls, capability: str,
                cfg: Optional[dict] = None) -> Optional[str]:
        """As the inner attention, but never a class token (a window is a
        piece of the grid)."""
        if capability == 'grid_free':
            return 'a window is a piece of the grid: no class token'
        if capability == 'takes_mask':
            return super().refusal(capability, cfg)
        return cls.configured_class(cfg).refusal(capability, cfg)

    @classmethod
    def configured_class(cls, cfg: Optional[dict] = None) -> type:
        """The attention inside the windows: the wrapper hands it its
        keywords."""
        return attention_class((cfg or {}).get('window_msa', 'WindowMSA'))

    @property
    def inner(self) -> TokenAttention:
        return self.w_msa

    @classmethod
    def min_grid(cls, cfg: Optional[dict] = None) -> int:
        """A whole window, unless small maps are padded to one."""
        if argument_value(cls, cfg, 'pad_small_map'):
            return 1
        return min(to_2tuple_int(argument_value(cls, cfg, 'window_size')))

    @staticmethod
    def can_wrap(attention: type, shifted: bool,
                 cfg: Optional[dict] = None) -> bool:
        """Whether ``attention`` built from ``cfg`` can run in these
        windows: any attention in plain windows, one that takes Swin's mask
        (a softmax attention whose keys are the window's) in shifted
        ones."""
        return not shifted or attention.supports('takes_mask', cfg)

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
                state: Optional[AttentionState] = None) -> AttentionOutput:
        windows, padded, shift, mask = self.to_windows(x, hw_shape)
        extra = dict(mask=mask) if mask is not None else {}
        out, state = self.w_msa(windows, self.window_size, state, **extra)
        if state is not None:
            state = state.in_windows(windows.shape[0] // x.shape[0])
        return self.from_windows(out, padded, shift, hw_shape), state

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
