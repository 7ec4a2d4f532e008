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
    """The gradients of ``function(*inputs, *constants)`` w.r.t. each
    tensor of ``inputs`` (the CPU path of a backward op): an empty tensor
    for a None input.

    By ``torch.func.vjp``: inside a custom op autograd does not record
    (the dispatcher has stepped below it), functorch's transforms do.
    """
    present = [i for i, t in enumerate(inputs) if t is not None]

    def of_present(*tensors):
        args = list(inputs)
        for i, t in zip(present, tensors):
            args[i] = t
        return function(*args, *constants)

    _, vjp = torch.func.vjp(of_present, *(inputs[i] for i in present))
    grads = dict(zip(present, vjp(grad)))
    return [grads[i] if i in grads else grad.new_empty(0)
            for i in range(len(inputs))]


def save_inputs(ctx, inputs, output):
    """``setup_context`` of every op here: tensors saved for backward, the
    rest (Nones, sizes, flags) kept as they are."""
    ctx.save_for_backward(*(t for t in inputs if isinstance(t, torch.Tensor)))
    ctx.tensor_slots = [isinstance(t, torch.Tensor) for t in inputs]
    ctx.constants = [t for t in inputs if not isinstance(t, torch.Tensor)]


def save_with_aux(ctx, inputs, output):
    """``setup_context`` of an op that returns ``[output, aux]``: the
    kernels' by-product its backward reads (a log-sum-exp, fp32 sums)
    saved with the inputs (``saved_inputs`` gives it last), not
    differentiable, and no zero tensor made for its gradient (the backward
    gets None for it)."""
    save_inputs(ctx, (*inputs, output[1]), output)
    ctx.mark_non_differentiable(output[1])
    ctx.set_materialize_grads(False)


def saved_inputs(ctx) -> list:
    """The op's inputs again, Nones included."""
    tensors, constants = iter(ctx.saved_tensors), iter(ctx.constants)
    return [next(tensors) if slot else next(constants)
            for slot in ctx.tensor_slots]
