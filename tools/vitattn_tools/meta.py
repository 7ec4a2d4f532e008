"""Shape-only model builds on the meta device, without the cost of filling
weights that do not exist."""
from contextlib import contextmanager
from typing import Iterator

import torch

from vitattn_mm.models.layers import LinspaceOnCPU


class NoFillOnMeta(LinspaceOnCPU):
    """:class:`~vitattn_mm.models.layers.LinspaceOnCPU` that also skips the
    fills of weight initialisation on meta tensors.

    They fill nothing there, yet torch runs them through its Python
    reference kernels (``clamp_`` takes about 2 ms a call, and every
    ``trunc_normal_`` calls it): most of the time of a meta-device build of
    a whole detector. These ops change neither shape nor dtype, so the
    built model is the same. One mode for both (not two stacked): every
    torch call of the build passes through each mode on the stack.
    """

    #: The in-place fills as the mode sees them: ``torch.nn.init``
    #: functions that dispatch as a whole (what they call inside is not
    #: seen again) and the tensor methods the others call directly.
    FILLS = frozenset({
        torch.Tensor.uniform_, torch.Tensor.normal_, torch.Tensor.erfinv_,
        torch.Tensor.clamp_, torch.nn.init.uniform_, torch.nn.init.normal_,
        torch.nn.init.kaiming_uniform_
    })

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.FILLS:
            # torch.nn.init dispatches with the tensor as a keyword.
            tensor = args[0] if args else kwargs['tensor']
            if tensor.is_meta:
                return tensor
        return super().__torch_function__(func, types, args, kwargs)


@contextmanager
def on_meta_device() -> Iterator[None]:
    """Build shapes only: modules created inside live on the meta device
    (no memory), ``torch.linspace`` still gives values
    (:class:`~vitattn_mm.models.layers.LinspaceOnCPU`, for drop-path rates
    read with ``.item()``) and initialisation fills are skipped
    (:class:`NoFillOnMeta`).

    Example:
        >>> with on_meta_device():
        ...     model = MODELS.build(cfg.model)
        >>> sum(p.numel() for p in model.parameters())
    """
    with torch.device('meta'), NoFillOnMeta():
        yield
