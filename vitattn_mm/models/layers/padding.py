"""Size-aware primitives: padding that keeps input sizes symbolic when a
graph is captured.

ONNX export and ``torch.compile`` record one graph from one example input.
A size that passes through a Python ``int``, a ``math.ceil`` or an ``if``
becomes a constant of that graph (ONNX) or a guard that recompiles at the
next size (``torch.compile``). The primitives here (the padding of patch
embeddings and mergings, and through :func:`padded_size` the windows and
position-embedding resizing) keep such sizes as symbolic arithmetic while
a graph is captured and change nothing in eager mode. They are built
directly by the backbones; nothing is swapped after construction.
"""
from typing import Sequence, Tuple

import torch
import torch.nn.functional as F
from mmcv.cnn.bricks.transformer import (AdaptivePadding, PatchEmbed,
                                         PatchMerging)


def is_capturing() -> bool:
    """Whether the running forward pass is being captured into a graph that
    must serve other input sizes (ONNX export or ``torch.compile``).

    A plain TorchScript trace (the FLOP counter's) is not: it records what
    eager mode computes at its one input size.
    """
    return torch.onnx.is_in_onnx_export() or torch.compiler.is_compiling()


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


class CornerPadding(AdaptivePadding):
    """mmcv's ``AdaptivePadding`` in 'corner' mode for ``kernel == stride``
    (patch embeddings, patch merging, strided reductions), with the padding
    computed from :func:`padded_size`.

    mmcv computes it with ``math.ceil`` and pads only when it is non-zero:
    the size leaves the graph. Here the amount stays an expression of the
    input size and, while a graph is captured, the (possibly zero) padding
    is always applied. Eager results are identical to mmcv's.

    Args:
        stride (int | tuple[int, int]): Kernel and stride.
    """

    def __init__(self, stride):
        super().__init__(kernel_size=stride, stride=stride, padding='corner')

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pad_h = padded_size(x.shape[-2], self.stride[0]) - x.shape[-2]
        pad_w = padded_size(x.shape[-1], self.stride[1]) - x.shape[-1]
        if is_capturing() or pad_h or pad_w:
            x = F.pad(x, [0, pad_w, 0, pad_h])
        return x


def _use_corner_padding(module) -> None:
    padding = getattr(module, 'adaptive_padding', None)
    if (padding is not None and padding.padding == 'corner'
            and tuple(padding.kernel_size) == tuple(padding.stride)
            and tuple(padding.dilation) == (1, 1)):
        module.adaptive_padding = CornerPadding(padding.stride)


class CornerPatchEmbed(PatchEmbed):
    """mmcv's ``PatchEmbed`` (same arguments, parameters and eager results)
    whose corner padding is a :class:`CornerPadding`."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _use_corner_padding(self)


class CornerPatchMerging(PatchMerging):
    """mmcv's ``PatchMerging`` (same arguments, parameters and eager
    results) whose corner padding is a :class:`CornerPadding`."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _use_corner_padding(self)
