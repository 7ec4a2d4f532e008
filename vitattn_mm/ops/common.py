"""What every custom op of the package shares: tile sizes, the layout the
kernels read, the CPU path of a backward op, saving inputs for autograd."""
from typing import List, Optional

import torch


def block_d(head_dims: int) -> int:
    """Channels per head as a kernel tile: a power of two, at least 16
    (``tl.dot``'s least)."""
    return max(16, 1 << (head_dims - 1).bit_length())


def rows(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """``t`` with unit channel stride, as the kernels read it."""
    return t if t is None or t.stride(-1) == 1 else t.contiguous()


def eager_grads(function, grad, inputs, constants) -> List[torch.Tensor]:
    """The gradients of ``function(*inputs, *constants)`` by autograd (the
    CPU path of a backward op): an empty tensor for a None input."""
    with torch.enable_grad():
        leaves = [None if t is None else t.detach().requires_grad_()
                  for t in inputs]
        out = function(*leaves, *constants)
        wanted = [t for t in leaves if t is not None]
        grads = iter(torch.autograd.grad(out, wanted, grad,
                                         allow_unused=True))
    result = []
    for t in leaves:
        g = None if t is None else next(grads)
        result.append(grad.new_empty(0) if t is None else
                      torch.zeros_like(t) if g is None else g)
    return result


def save_inputs(ctx, inputs, output):
    """``setup_context`` of every op here: tensors saved for backward, the
    rest (Nones, sizes, flags) kept as they are."""
    ctx.save_for_backward(*(t for t in inputs if isinstance(t, torch.Tensor)))
    ctx.tensor_slots = [isinstance(t, torch.Tensor) for t in inputs]
    ctx.constants = [t for t in inputs if not isinstance(t, torch.Tensor)]


def saved_inputs(ctx) -> list:
    """The op's inputs again, Nones included."""
    tensors, constants = iter(ctx.saved_tensors), iter(ctx.constants)
    return [next(tensors) if slot else next(constants)
            for slot in ctx.tensor_slots]
