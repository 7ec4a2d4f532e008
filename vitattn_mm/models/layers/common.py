"""Small helpers every family uses."""
import torch
from torch.overrides import TorchFunctionMode


def check_heads(embed_dims: int, num_heads: int) -> int:
    """Channels per head; a clear error when the heads do not divide C."""
    if embed_dims % num_heads:
        raise ValueError(f'embed_dims {embed_dims} is not divisible by '
                         f'num_heads {num_heads}')
    return embed_dims // num_heads


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
