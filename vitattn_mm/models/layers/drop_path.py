"""Stochastic depth on the residual: ``identity + drop_path(branch)``, one
pass over the tokens each way.

mmcv's ``DropPath`` in training divides the branch by the keep rate and
masks it, and the residual then adds it: three passes over the tokens
forward, and backward a cast, a product with the mask and a division.
Every block of every skeleton does it twice per step (the projected
training step of FLatten-Swin-T at 800x1280: 1,439 -> 1,393 ops, 16.5 ->
16.1 ms).
"""
import torch
import torch.nn as nn
from mmcv.cnn.bricks import DropPath
from torch.autograd.function import once_differentiable

from .size_aware import capturing


def add_residual(identity: torch.Tensor, branch: torch.Tensor,
                 drop_path: nn.Module) -> torch.Tensor:
    """``identity + drop_path(branch)``, ``drop_path`` being mmcv's
    ``DropPath`` (or ``nn.Identity``).

    In training the per-sample mask is mmcv's own draw (the same
    ``torch.rand`` in the branch's dtype, so a seed drops the same
    samples), and one ``addcmul`` adds ``branch * mask / keep``: the
    ``1 / keep`` a scalar, applied in fp32 as mmcv's division applies
    ``keep`` (a bf16 scale tensor would shorten every kept branch by
    0.16% at a drop rate of 0.1). The sum is rounded once where mmcv
    rounds the scaled branch first: the same within an ulp.
    Elsewhere (evaluation, rate 0, shapes that broadcast, a module other
    than mmcv's ``DropPath``) the modules' own sum.

    Args:
        identity (Tensor): The residual stream.
        branch (Tensor): The block's branch, ``identity``'s shape.
        drop_path (nn.Module): The block's ``DropPath`` (its
            ``drop_prob``) or ``nn.Identity``.

    Returns:
        Tensor: ``identity + drop_path(branch)``.
    """
    # Another module (timm's DropPath may not rescale) keeps its own rule.
    drop_prob = float(drop_path.drop_prob) if isinstance(
        drop_path, DropPath) else 0.
    if (not drop_path.training or drop_prob == 0.
            or identity.shape != branch.shape):
        return identity + drop_path(branch)
    keep = 1 - drop_prob
    shape = (branch.shape[0], ) + (1, ) * (branch.dim() - 1)
    mask = (keep + torch.rand(
        shape, dtype=branch.dtype, device=branch.device)).floor()
    if capturing():
        # A compiler fuses the ops anyway; ONNX has no backward.
        return torch.addcmul(identity, branch, mask, value=1 / keep)
    return DropPathResidual.apply(identity, branch, mask, 1 / keep)


class DropPathResidual(torch.autograd.Function):
    """``identity + branch * mask * scale`` (``mask`` per sample, ``scale``
    a Python float) with its gradient in one pass: autograd's own
    formula for ``addcmul`` would first round ``mask * scale`` to the
    mask's dtype (bf16 under autocast), and cast the branch's gradient in
    a pass of its own where the stream is fp32 and the branch bf16."""

    @staticmethod
    def forward(identity: torch.Tensor, branch: torch.Tensor,
                mask: torch.Tensor, scale: float) -> torch.Tensor:
        return torch.addcmul(identity, branch, mask, value=scale)

    @staticmethod
    def setup_context(ctx, inputs, output):
        identity, branch, mask, ctx.scale = inputs
        ctx.dtypes = identity.dtype, branch.dtype
        ctx.save_for_backward(mask)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        mask, = ctx.saved_tensors
        identity_dtype, branch_dtype = ctx.dtypes
        grad_identity = grad_branch = None
        if ctx.needs_input_grad[0]:
            grad_identity = grad.to(identity_dtype)
        if ctx.needs_input_grad[1]:
            # 0 + grad * mask * scale, in fp32 at least, written in the
            # branch's dtype by the same kernel.
            grad_branch = torch.addcmul(
                grad.new_zeros(()), grad, mask, value=ctx.scale,
                out=torch.empty_like(grad, dtype=branch_dtype))
        return grad_identity, grad_branch, None, None
