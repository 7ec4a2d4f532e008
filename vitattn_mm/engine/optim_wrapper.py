from contextlib import ExitStack, contextmanager
from typing import Optional, Sequence, Union

import torch
import torch.nn as nn
from mmengine.model import is_model_wrapper
from mmengine.optim import OptimWrapper
from mmengine.registry import OPTIM_WRAPPERS
from mmengine.runner.amp import autocast


def _to_float32(outputs):
    if isinstance(outputs, torch.Tensor):
        return outputs.float() if outputs.is_floating_point() else outputs
    if isinstance(outputs, (list, tuple)):
        return type(outputs)(_to_float32(o) for o in outputs)
    if isinstance(outputs, dict):
        return {k: _to_float32(v) for k, v in outputs.items()}
    return outputs


@OPTIM_WRAPPERS.register_module()
class AutocastOptimWrapper(OptimWrapper):
    """Mixed precision without loss scaling, on any device (CPU included).

    mmengine's ``AmpOptimWrapper`` asserts a GPU. bf16 has fp32's exponent
    range, so it needs no gradient scaler: this wrapper only runs the
    training forward pass under ``autocast(dtype)``. ``tools/train.py
    --amp`` picks it on machines without CUDA.

    With ``modules`` only those children of the model run under autocast
    and hand fp32 outputs on: detection heads then decode boxes in fp32 (a
    bf16 coordinate near 1000 px is only exact to 4-8 px) and mmcv's CPU
    ops (NMS, RoIAlign), which have no bf16 kernels, get fp32 inputs.

    Args:
        dtype (str | torch.dtype): Autocast dtype. Default: 'bfloat16'.
        modules (Sequence[str], optional): Names of the model's children to
            autocast, e.g. ``('backbone', 'neck')``. Default: None (the
            whole forward pass).
        **kwargs: Passed to :class:`~mmengine.optim.OptimWrapper`.
    """

    def __init__(self,
                 dtype: Union[str, torch.dtype] = 'bfloat16',
                 modules: Optional[Sequence[str]] = None,
                 **kwargs):
        super().__init__(**kwargs)
        self.cast_dtype = getattr(torch, dtype) if isinstance(dtype,
                                                              str) else dtype
        self.modules = tuple(modules) if modules else None

    def _autocast_children(self, model: nn.Module, stack: ExitStack) -> None:
        if is_model_wrapper(model):
            model = model.module
        dtype = self.cast_dtype
        for name in self.modules:
            child = getattr(model, name, None)
            if child is None:
                continue
            contexts = []

            def enter(module, args, contexts=contexts):
                contexts.append(autocast(dtype=dtype))
                contexts[-1].__enter__()

            def leave(module, args, outputs, contexts=contexts):
                contexts.pop().__exit__(None, None, None)
                return _to_float32(outputs)

            stack.callback(child.register_forward_pre_hook(enter).remove)
            stack.callback(child.register_forward_hook(leave).remove)

    @contextmanager
    def optim_context(self, model: nn.Module):
        with super().optim_context(model), ExitStack() as stack:
            if self.modules is None:
                stack.enter_context(autocast(dtype=self.cast_dtype))
            else:
                self._autocast_children(model, stack)
            yield
