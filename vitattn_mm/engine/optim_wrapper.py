from contextlib import contextmanager
from typing import Union

import torch
import torch.nn as nn
from mmengine.optim import OptimWrapper
from mmengine.registry import OPTIM_WRAPPERS
from mmengine.runner.amp import autocast


@OPTIM_WRAPPERS.register_module()
class AutocastOptimWrapper(OptimWrapper):
    """Mixed precision without loss scaling, on any device (CPU included).

    mmengine's ``AmpOptimWrapper`` asserts a GPU. bf16 has fp32's exponent
    range, so it needs no gradient scaler: this wrapper only runs the
    forward pass under ``autocast(dtype)``. ``tools/train.py --amp`` picks it
    on machines without CUDA.

    Args:
        dtype (str | torch.dtype): Autocast dtype. Default: 'bfloat16'.
        **kwargs: Passed to :class:`~mmengine.optim.OptimWrapper`.
    """

    def __init__(self, dtype: Union[str, torch.dtype] = 'bfloat16',
                 **kwargs):
        super().__init__(**kwargs)
        self.cast_dtype = getattr(torch, dtype) if isinstance(dtype,
                                                              str) else dtype

    @contextmanager
    def optim_context(self, model: nn.Module):
        with super().optim_context(model), autocast(dtype=self.cast_dtype):
            yield
