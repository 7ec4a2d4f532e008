"""What inputs a backbone takes: each stage's grid for an input side, the
smallest side, and a clear error below it.

The grid rules are plain functions of the layout, so a description
(:class:`~.backbone_spec.BackboneSpec`) answers them without a model.
"""
from typing import Callable, List, Sequence, Tuple, Union

import torch

#: ``grid_sides(size)``: each stage's token-grid side for an input side.
GridSides = Callable[[int], List[int]]


def strided_grid_sides(strides: Sequence[int], size: int) -> List[int]:
    """Each stage's grid side in a layout that pads everywhere:
    ``ceil(size / stride)`` for each stage's stride (pixels per token)."""
    return [-(-size // stride) for stride in strides]


def patch_grid_sides(layout: Sequence[Tuple[int, int, Union[int, str]]],
                     size: int) -> List[int]:
    """Each stage's grid side behind a chain of patch embeddings, one
    ``(kernel, stride, padding)`` per stage: an int padding drops partial
    patches (mmdet's PVT), 'corner' pads to whole ones."""
    sides = []
    for kernel, stride, padding in layout:
        size = ((size + 2 * padding - kernel) // stride + 1
                if isinstance(padding, int) else -(-size // stride))
        sides.append(size)
    return sides


def grids_at(grid_sides: GridSides,
             hw: Sequence[int]) -> List[Tuple[int, int]]:
    """Each stage's ``(H, W)`` grid for an ``(H, W)`` input, by the
    layout's rule (e.g. the pretraining grids)."""
    return list(zip(*(grid_sides(side) for side in hw)))


def least_input_size(grid_sides: GridSides, min_grids: Sequence[int]) -> int:
    """Smallest input side whose every stage's grid holds the least grid
    its layers need (1 in a layout that pads everywhere).

    Searched (grids grow with the input) and not cached: a cache filled in
    ``forward`` would make a captured graph recompile.
    """
    def takes(size):
        return all(side >= need
                   for side, need in zip(grid_sides(size), min_grids))

    high = 1
    while not takes(high):
        high *= 2
    low = high // 2  # does not fit (or 0)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if takes(middle) else (middle, high)
    return high


class InputSize:
    """The input-size check of a :class:`StagedBackbone`, read off its
    description (:attr:`backbone_spec`: the grid rule of its layout and
    the least grid each stage's attentions take)."""

    min_grids: List[int]

    def grid_sides(self, size: int) -> List[int]:
        """Each stage's token-grid side for an input side of ``size``."""
        return self.backbone_spec.grid_sides(size)

    @property
    def min_input_size(self) -> int:
        """Smallest input side (pixels) the network can process (1 in a
        layout that pads everywhere, as the stock Swin's)."""
        return least_input_size(self.grid_sides, self.min_grids)

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
