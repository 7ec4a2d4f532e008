"""Keeping input sizes symbolic when a graph is captured.

ONNX export (TorchScript tracing) and ``torch.compile`` record one graph
from one example input. A size that passes through a Python ``int``, a
``math.ceil`` or an ``if`` becomes a constant of that graph (ONNX) or a guard
that recompiles at the next size (``torch.compile``). The helpers here keep
such sizes as tensor / symbolic arithmetic while a graph is being captured,
and change nothing in eager mode.
"""
import contextlib
from typing import Iterator

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn.bricks.transformer import AdaptivePadding
from mmpretrain.models.utils.attention import ShiftWindowMSA


_TRACE_AS_EAGER = False


def is_capturing() -> bool:
    """Whether the running forward pass is being captured into a graph
    (TorchScript tracing, ONNX export or ``torch.compile``) that must serve
    other input sizes; False inside :func:`trace_as_eager`."""
    if _TRACE_AS_EAGER:
        return False
    return (torch.jit.is_tracing() or torch.onnx.is_in_onnx_export()
            or torch.compiler.is_compiling())


@contextlib.contextmanager
def trace_as_eager() -> Iterator[None]:
    """Trace exactly what eager mode computes at this input size.

    The FLOP counter traces the model (TorchScript) for one size only: it
    must count eager work, not the size-independent graph (e.g. a position
    embedding resized to its own grid, which eager mode skips).
    """
    global _TRACE_AS_EAGER
    previous, _TRACE_AS_EAGER = _TRACE_AS_EAGER, True
    try:
        yield
    finally:
        _TRACE_AS_EAGER = previous


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


class CornerPadding(AdaptivePadding):
    """mmcv's ``AdaptivePadding`` in 'corner' mode for ``kernel == stride``
    (patch embeddings, patch merging, strided reductions), with the padding
    computed from :func:`padded_size`.

    mmcv computes it with ``math.ceil`` and pads only when it is non-zero:
    the size leaves the graph (a constant in an ONNX file, a recompile
    guard in ``torch.compile``). Here the amount stays an expression of the
    input size and, while a graph is captured, the (possibly zero) padding
    is always applied. Eager results are identical to mmcv's.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pad_h = padded_size(x.shape[-2], self.stride[0]) - x.shape[-2]
        pad_w = padded_size(x.shape[-1], self.stride[1]) - x.shape[-1]
        if is_capturing() or pad_h or pad_w:
            x = F.pad(x, [0, pad_w, 0, pad_h])
        return x

    @classmethod
    def supports(cls, module: nn.Module) -> bool:
        """Whether ``module`` pads exactly as this class does."""
        return (type(module) is AdaptivePadding
                and module.padding == 'corner'
                and tuple(module.kernel_size) == tuple(module.stride)
                and tuple(module.dilation) == (1, 1))


def use_traceable_padding(model: nn.Module) -> nn.Module:
    """Replace, in place, every mmcv ``AdaptivePadding`` of ``model`` that
    :class:`CornerPadding` reproduces and every mmpretrain ``ShiftWindowMSA``
    by :class:`TraceableShiftWindowMSA` (neither changes the weights, so
    checkpoints are unaffected). Returns ``model``."""
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if CornerPadding.supports(child):
                new = CornerPadding.__new__(CornerPadding)
                new.__dict__.update(child.__dict__)
                setattr(module, name, new)
    for module in model.modules():
        if type(module) is ShiftWindowMSA:
            # Same state, another forward: keys and weights are unchanged.
            module.__class__ = TraceableShiftWindowMSA
    return model


class TraceableShiftWindowMSA(ShiftWindowMSA):
    """mmpretrain's ``ShiftWindowMSA`` with its size arithmetic written for
    graph capture: the padding from :func:`padded_size` (mmpretrain's
    ``(w - W % w) % w`` nests a modulo per stage into every later size
    expression), partition and reverse from the padded sizes (mmpretrain's
    reverse divides symbolic sizes as floats). Same results in eager mode.
    """

    def forward(self, query: torch.Tensor, hw_shape) -> torch.Tensor:
        B, L, C = query.shape
        H, W = hw_shape
        window, shift = self.window_size, self.shift_size
        if min(H, W) == window:
            # Classification models (pad_small_map=False) do not shift a
            # map of exactly one window, as the original Swin.
            shift = shift if self.pad_small_map else 0
        elif min(H, W) < window:
            assert self.pad_small_map, (
                f'The input shape ({H}, {W}) is smaller than the window '
                f'size ({window}): set pad_small_map=True')
        Hp, Wp = padded_size(H, window), padded_size(W, window)
        x = F.pad(query.view(B, H, W, C), (0, 0, 0, Wp - W, 0, Hp - H))
        if shift > 0:
            x = torch.roll(x, shifts=(-shift, -shift), dims=(1, 2))
        mask = self.get_attn_mask((Hp, Wp), window, shift, query.device)
        windows = x.view(B, Hp // window, window, Wp // window, window,
                         C).permute(0, 1, 3, 2, 4, 5).reshape(
                             -1, window * window, C)
        windows = self.w_msa(windows, mask=mask)
        x = windows.view(B, Hp // window, Wp // window, window, window,
                         C).permute(0, 1, 3, 2, 4, 5).reshape(B, Hp, Wp, C)
        if shift > 0:
            x = torch.roll(x, shifts=(shift, shift), dims=(1, 2))
        return self.drop(x[:, :H, :W, :].reshape(B, H * W, C))
