"""What inputs a backbone takes: the smallest side, and a clear error below
it."""
from typing import List, Tuple

import torch


class InputSize:
    """The input-size check of a :class:`StagedBackbone`.

    A skeleton gives each stage's stride (:attr:`stage_strides`, or
    :meth:`grid_sides` where its layout drops partial patches);
    :meth:`~StagedBackbone.build_blocks` records in ``min_grids`` the least
    grid side each stage's attentions take (e.g. a strided reduction
    without padding needs a whole kernel).
    """

    #: Each stage's stride from the input (pixels per token); the stages'
    #: grids are ``ceil(size / stride)``, as every padded layout computes
    #: them.
    stage_strides: Tuple[int, ...] = ()
    min_grids: List[int]

    def grid_sides(self, size: int) -> List[int]:
        """Each stage's token-grid side for an input side of ``size``."""
        return [-(-size // stride) for stride in self.stage_strides]

    def takes_input_size(self, size: int) -> bool:
        """Whether every stage's grid at input side ``size`` holds what its
        layers need."""
        return all(side >= need for side, need in zip(
            self.grid_sides(size), self.min_grids))

    @property
    def min_input_size(self) -> int:
        """Smallest input side (pixels) the network can process (1 in a
        layout that pads everywhere, as the stock Swin's).

        Searched (grids grow with the input) and not cached: a cache filled
        in ``forward`` would make a captured graph recompile.
        """
        high = 1
        while not self.takes_input_size(high):
            high *= 2
        low = high // 2  # does not fit (or 0)
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (low, middle) if self.takes_input_size(middle) \
                else (middle, high)
        return high

    def check_input_size(self, x: torch.Tensor) -> None:
        """Raise a clear error for inputs the network cannot process."""
        if x.dim() != 4:
            raise ValueError(f'{type(self).__name__} expects (B, C, H, W) '
                             f'images, got shape {tuple(x.shape)}')
        if min(x.shape[-2:]) < self.min_input_size:
            raise ValueError(
                f'{type(self).__name__} needs inputs of at least '
                f'{self.min_input_size}x{self.min_input_size} pixels, got '
                f'{x.shape[-2]}x{x.shape[-1]}.')
