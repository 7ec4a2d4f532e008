"""LayerScale: a learned per-channel factor."""
import torch
import torch.nn as nn


class LayerScale(nn.Module):
    """Multiply every channel by a learned factor (Touvron et al., CaiT).

    The parameter is ``weight`` (``(C,)``), as in mmpretrain's
    ``LayerScale``, so weights saved from either load into the other.

    Args:
        dim (int): Channels C.
        init_value (float): Initial factor. Default: 1e-5.
        data_format (str): 'channels_last' for ``(..., C)`` inputs,
            'channels_first' for ``(B, C, ...)``. Default: 'channels_last'.
    """

    def __init__(self,
                 dim: int,
                 init_value: float = 1e-5,
                 data_format: str = 'channels_last'):
        super().__init__()
        if data_format not in ('channels_last', 'channels_first'):
            raise ValueError("data_format must be 'channels_last' or "
                             f"'channels_first', got {data_format!r}")
        self.data_format = data_format
        self.weight = nn.Parameter(torch.full((dim, ), float(init_value)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.data_format == 'channels_first':
            return x * self.weight.view(-1, *(1, ) * (x.dim() - 2))
        return x * self.weight

    def extra_repr(self) -> str:
        return f'dim={self.weight.numel()}, data_format={self.data_format!r}'
