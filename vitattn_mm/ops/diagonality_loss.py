"""The bounded Diagonality-Preserving loss of square score maps as a custom
op (``torch.ops.vitattn.diagonality_loss``): Less-Attention's loss on the
maps of Swin's windows, one pass over them each way where the eager
composition takes a dozen (an fp32 softmax, the map against its
transpose, a masked fill, two row maxima ... and their gradients). As
:mod:`.linear_attention`: the eager composition is the reference and the
CPU path, the shape function serves ``torch.compile`` and the cost model,
the kernels (:mod:`.triton_diagonality_loss`) run on CUDA and under
``TRITON_INTERPRET=1``.
"""
import torch
from torch.utils.flop_counter import register_flop_formula

from ..models.layers.common import full_precision
from .backend import kernels_run_on
from .common import eager_grads, save_inputs, saved_inputs

#: The largest map side the op takes (its kernels' tile).
MAX_SIDE = 64


def diagonality_terms(probs: torch.Tensor) -> torch.Tensor:
    """Symmetry + diagonality of row-stochastic ``(..., N, N)`` maps (see
    :func:`~vitattn_mm.models.attentions.less_attention.loss.
    diagonality_preserving_loss`): means over rows and maps."""
    asymmetry = (probs - probs.transpose(-2, -1)).abs().sum(-1).mean() / 2
    diag = probs.diagonal(dim1=-2, dim2=-1)
    off_diag = probs.masked_fill(
        torch.eye(probs.shape[-1], dtype=torch.bool, device=probs.device), 0)
    excess = (off_diag.amax(dim=-1) - diag).clamp_min(0)
    dominance = (excess / probs.amax(dim=-1)).mean()
    return asymmetry + dominance


def diagonality_loss_eager(logits: torch.Tensor) -> torch.Tensor:
    """The bounded loss of square ``(B, heads, N, N)`` logits, eagerly
    (fp32)."""
    with full_precision(logits):
        return diagonality_terms(logits.float().softmax(dim=-1))


def _kernels():
    from . import triton_diagonality_loss
    return triton_diagonality_loss


@torch.library.custom_op('vitattn::diagonality_loss', mutates_args=())
def diagonality_loss_op(logits: torch.Tensor) -> torch.Tensor:
    """:func:`diagonality_loss_eager` as one op (maps of side <=
    ``MAX_SIDE``)."""
    if not kernels_run_on(logits.device):
        return diagonality_loss_eager(logits)
    tk = _kernels()
    *_, N, _ = logits.shape
    maps = logits.numel() // (N * N)
    partial = torch.empty(maps, 2, device=logits.device,
                          dtype=torch.float32)
    tk.forward_kernel[(maps, )](logits.contiguous(), partial, N,
                                BLOCK=tk.BLOCK)
    return partial.sum() / (maps * N)


@diagonality_loss_op.register_fake
def _(logits):
    return logits.new_empty((), dtype=torch.float32)


@torch.library.custom_op('vitattn::diagonality_loss_backward',
                         mutates_args=())
def diagonality_loss_backward_op(grad: torch.Tensor,
                                 logits: torch.Tensor) -> torch.Tensor:
    """The gradient of the logits."""
    if not kernels_run_on(logits.device):
        return eager_grads(diagonality_loss_eager, grad, (logits, ), ())[0]
    tk = _kernels()
    *_, N, _ = logits.shape
    maps = logits.numel() // (N * N)
    dlogits = torch.empty_like(logits, memory_format=torch.contiguous_format)
    tk.backward_kernel[(maps, )](logits.contiguous(), grad.reshape(1), dlogits,
                                 N, 1. / (maps * N), BLOCK=tk.BLOCK)
    return dlogits


@diagonality_loss_backward_op.register_fake
def _(grad, logits):
    return torch.empty_like(logits)


def _backward(ctx, grad):
    logits, = saved_inputs(ctx)
    return diagonality_loss_backward_op(grad, logits)


diagonality_loss_op.register_autograd(_backward, setup_context=save_inputs)


@register_flop_formula(torch.ops.vitattn.diagonality_loss)
def _flops(logits, *args, out_shape=None, **kwargs) -> int:
    """No products: a memory-bound pass."""
    return 0


@register_flop_formula(torch.ops.vitattn.diagonality_loss_backward)
def _backward_flops(grad, logits, *args, out_shape=None, **kwargs) -> int:
    return 0
