"""Size-aware primitives: padding whose amount stays an expression of the
input size.

ONNX export and ``torch.compile`` record one graph from one example input.
A size that passes through a Python ``int``, a ``math.ceil`` or an ``if``
becomes a constant of that graph (ONNX) or a guard that recompiles at the
next size (``torch.compile``). The padding of patch embeddings, mergings
and windows is therefore always applied in a captured graph, by an amount
computed with :func:`padded_size` (zero when the size is a multiple
already), which serves every input size; eagerly :func:`pad` skips a zero
amount (``F.pad`` would copy the whole tensor for it).
"""
from typing import Sequence, Tuple

import torch
import torch.nn.functional as F
from mmcv.cnn.bricks.transformer import (AdaptivePadding, PatchEmbed,
                                         PatchMerging)

from .size_aware import capturing


def pad(x: torch.Tensor, amounts: Sequence, value: float = 0.
        ) -> torch.Tensor:
    """``F.pad(x, amounts, value=value)`` (negative amounts crop), except
    that eagerly, where every amount is zero, it is ``x`` itself: ``F.pad``
    copies the tensor for nothing (at 800x1280 no patch embedding of a PVT
    and no reduction pads, and each copy cost a pass each way). While a
    graph is captured it always pads, since whether an amount is zero
    follows the input size."""
    if not capturing() and not any(amounts):
        return x
    return F.pad(x, amounts, value=value)


def padded_size(size, multiple: int):
    """``size`` rounded up to a multiple of ``multiple``, as
    ``ceil(size / multiple) * multiple``.

    Written with one occurrence of ``size``: ``size + (-size) % multiple``
    is equal, but under ``torch.compile`` the symbolic size of every later
    stage repeats the expression of the one before, so the expressions (and
    the compile time) grow exponentially with the number of stages. Only
    non-negative operands: ONNX's integer division truncates towards zero,
    so ``-(-size // multiple)`` would round the wrong way in an ONNX graph.
    """
    return (size + multiple - 1) // multiple * multiple


def grid_after_stride(hw_shape: Sequence[int], stride: int) -> Tuple[int, int]:
    """Token grid after a stride-``stride`` patch embedding, patch merging or
    spatial reduction with corner padding (partial patches at the bottom and
    right count)."""
    return tuple((s + stride - 1) // stride for s in hw_shape)


def pad_corner(x: torch.Tensor, multiple: Sequence[int]) -> torch.Tensor:
    """Zero-pad an NCHW map at the bottom / right to multiples of
    ``multiple`` ``(h, w)``."""
    H, W = x.shape[-2:]
    return pad(x, [0, padded_size(W, multiple[1]) - W, 0,
                   padded_size(H, multiple[0]) - H])


class CornerPadding(AdaptivePadding):
    """mmcv's ``AdaptivePadding`` in 'corner' mode for ``kernel == stride``
    (patch embeddings, patch merging, strided reductions), with the padding
    computed by :func:`pad_corner`.

    mmcv computes it with ``math.ceil`` and pads only when it is non-zero:
    the size leaves the graph. Here the amount stays an expression of the
    input size. Results are identical to mmcv's.

    Args:
        stride (int | tuple[int, int]): Kernel and stride.
    """

    def __init__(self, stride):
        super().__init__(kernel_size=stride, stride=stride, padding='corner')

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return pad_corner(x, self.stride)


def _use_corner_padding(module) -> None:
    padding = getattr(module, 'adaptive_padding', None)
    if (padding is not None and padding.padding == 'corner'
            and tuple(padding.kernel_size) == tuple(padding.stride)
            and tuple(padding.dilation) == (1, 1)):
        module.adaptive_padding = CornerPadding(padding.stride)


class CornerPatchEmbed(PatchEmbed):
    """mmcv's ``PatchEmbed`` (same arguments, parameters and results) whose
    corner padding is a :class:`CornerPadding`."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _use_corner_padding(self)


class CornerPatchMerging(PatchMerging):
    """mmcv's ``PatchMerging`` (same arguments, parameters and results)
    whose corner padding is a :class:`CornerPadding`."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _use_corner_padding(self)
