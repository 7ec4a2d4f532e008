"""Small helpers every skeleton uses."""
from numbers import Integral
from typing import Optional, Sequence, Tuple

import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode

from .size_aware import capturing


def nlc_to_nchw(x: torch.Tensor, hw_shape: Sequence[int]) -> torch.Tensor:
    """``(B, H*W, C)`` tokens -> a ``(B, C, H, W)`` map."""
    B, _, C = x.shape
    return x.transpose(1, 2).reshape(B, C, *hw_shape).contiguous()


def nchw_to_nlc(x: torch.Tensor) -> torch.Tensor:
    """A ``(B, C, H, W)`` map -> ``(B, H*W, C)`` tokens."""
    return x.flatten(2).transpose(1, 2).contiguous()


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``(B, N, C)`` -> a ``(B, heads, N, C / heads)`` view."""
    B, N, C = x.shape
    return x.reshape(B, N, num_heads, C // num_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor,
                dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """``(B, heads, N, d)`` -> ``(B, N, heads * d)``, cast to ``dtype`` in
    the same copy where one is given.

    Through an explicit copy (as ``reshape`` copies here anyway): the
    strides of a fused kernel's output differ between its eager and its
    decomposed (ONNX dynamo) form, and a graph traced as a view of the one
    breaks on the other. (``.to`` alone returns a tensor of its dtype as
    it is, so it casts only.)"""
    B, h, N, d = x.shape
    x = x.transpose(1, 2)
    if dtype is None or dtype == x.dtype:
        x = x.clone(memory_format=torch.contiguous_format)
    else:
        x = x.to(dtype, memory_format=torch.contiguous_format)
    return x.view(B, N, h * d)


def full_precision(x: torch.Tensor):
    """Autocast off for ``x``'s device: the fp32 core of an attention whose
    sums overflow fp16.

    torch has no autocast on the meta device; there the CPU's flag stands
    in, under which the cost model (``benchmarks/cost_model.py``) emulates
    a GPU's autocast, so a meta-device step sees this region as fp32 too.
    """
    return torch.autocast('cpu' if x.is_meta else x.device.type,
                          enabled=False)


def at_least_fp32(x: torch.Tensor) -> torch.Tensor:
    """``x`` in fp32 if it is in a lower precision (bf16, fp16), else as it
    is: a sum that must not round as bf16 does, without taking fp64
    inputs (a gradient check, a numerics test) down to fp32."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def autocast_once(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``x`` for two ops that autocast runs in its lower precision (two
    projections of the same tokens), cast once: under autocast an fp32
    ``x`` becomes two tensors of autocast's dtype, one cast, whose
    gradients are summed in fp32 by one op (:class:`_CastOnce`), the
    values autograd gives after autocast's two casts of ``x``, with one
    cast fewer each way. Otherwise (no autocast, ``x`` not fp32, a graph
    being captured: a compiler merges the casts) ``x`` twice."""
    device = 'cpu' if x.is_meta else x.device.type
    if x.dtype != torch.float32 or capturing() or \
            not torch.is_autocast_enabled(device):
        return x, x
    return _CastOnce.apply(x, torch.get_autocast_dtype(device))


class _CastOnce(torch.autograd.Function):
    """:func:`autocast_once`'s cast: its two outputs are one tensor."""

    @staticmethod
    def forward(x: torch.Tensor, dtype: torch.dtype):
        y = x.to(dtype)
        return y, y.view_as(y)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.dtype = inputs[0].dtype
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx, grad: Optional[torch.Tensor],
                 other: Optional[torch.Tensor]):
        if grad is None:
            grad, other = other, None
        if grad is None:
            return None, None
        grad = grad.to(ctx.dtype)
        # x's dtype by promotion: the sum of the two upcast gradients.
        return (grad if other is None else torch.add(grad, other)), None


class LinspaceOnCPU(TorchFunctionMode):
    """Compute ``torch.linspace`` on the CPU inside this context.

    mmpretrain's and mmdet's Swin draw their drop-path rates with
    ``torch.linspace(...).item()``, which fails when a model is built on the
    meta device (shape-only builds: parameter counts, config checks). Use
    ``with torch.device('meta'), LinspaceOnCPU(): MODELS.build(cfg)``.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.linspace:
            kwargs['device'] = 'cpu'
        return func(*args, **kwargs)


class InvalidArgument(ValueError, AssertionError):
    """A constructor argument the network cannot take. A ``ValueError``,
    and the ``AssertionError`` the stock OpenMMLab classes raise for the
    same argument (their checks are asserts), so code written against them
    catches it too."""


class InvalidArch(KeyError, AssertionError):
    """An arch name the class does not know, or a custom arch dict that
    lacks settings: a ``KeyError``, and the ``AssertionError`` mmpretrain's
    classes raise for it."""


def to_2tuple_int(value, name: str = 'size') -> Tuple[int, int]:
    """An int, or a sequence of one or two ints, as an ``(h, w)`` pair; a
    single entry serves both sides, as mmseg's ViT and the stock Swins
    read ``img_size``."""
    if isinstance(value, Integral) and not isinstance(value, bool):
        return int(value), int(value)
    if not isinstance(value, Sequence) or not all(
            isinstance(v, Integral) and not isinstance(v, bool)
            for v in value):
        raise TypeError(f'{name} must be an int or a tuple of ints, got '
                        f'{value!r}')
    if len(value) not in (1, 2):
        raise InvalidArgument(f'{name} must have one or two entries, got '
                              f'{tuple(value)}')
    return int(value[0]), int(value[-1])


def pretrain_input_size(img_size, pretrain_img_size, default=224):
    """The pretraining input size, which the stock classes name
    ``img_size`` (mmpretrain's classes, mmseg's ViT) or
    ``pretrain_img_size`` (mmdet's and mmseg's Swin and PVT): either name
    is taken; both, set away from the default to different sizes, raise
    naming both (one rule for every skeleton)."""
    given = [(name, value) for name, value in (
        ('img_size', img_size), ('pretrain_img_size', pretrain_img_size))
        if value is not None and value != default]
    if len(given) == 2 and to_2tuple_int(given[0][1]) != to_2tuple_int(
            given[1][1]):
        raise InvalidArgument(
            f'img_size={img_size!r} and pretrain_img_size='
            f'{pretrain_img_size!r}: both name the pretraining input size; '
            'give one')
    return given[0][1] if given else default


def freeze_module(module: nn.Module) -> None:
    """Put ``module`` in eval mode and stop its gradients."""
    module.eval()
    for param in module.parameters():
        param.requires_grad = False


def check_type(name: str, value, types) -> None:
    """Raise a TypeError naming ``name`` unless ``value`` is of ``types``
    (a bool is no int here)."""
    if isinstance(value, bool) and types is not bool:
        ok = False
    else:
        ok = isinstance(value, types)
    if not ok:
        expected = getattr(types, '__name__', str(types))
        raise TypeError(f'{name} must be {expected}, got {value!r}')
