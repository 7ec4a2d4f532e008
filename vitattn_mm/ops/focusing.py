"""FLatten's focusing function: the kernel of its queries and keys, with
its gradient written out for the eager path."""
from typing import Tuple

import torch
import torch.nn.functional as F

from ..models.layers.common import split_heads
from ..models.layers.size_aware import capturing

Dims = Tuple[int, ...]


def focused_features(x: torch.Tensor, s: torch.Tensor,
                     focusing_factor: float,
                     channel_dims: Dims = (-1, )) -> torch.Tensor:
    """FLatten's kernel of ``(..., C)`` queries or keys, in fp32:
    ``(ReLU(x) + 1e-6) / s``, raised to ``focusing_factor`` and rescaled to
    keep each token's norm over all C channels (``channel_dims``: the
    heads and channels of a head-major ``(B, heads, N, C / heads)``).

    Eagerly autograd sees one function (:class:`FocusedFeatures`) whose
    backward is written out: the chain of eight elementwise ops would
    otherwise save and walk back eight token maps, each pass a kernel on a
    GPU. A captured graph takes the ops themselves (a compiler fuses the
    chain; an ONNX graph has no backward)."""
    if capturing():
        return focused_features_ops(x, s, focusing_factor, channel_dims)
    return FocusedFeatures.apply(x, s, focusing_factor, channel_dims)[0]


def joins_queries_and_keys(x: torch.Tensor) -> bool:
    """Whether queries and keys are focused in one call
    (:func:`focused_joint`) rather than two (:func:`focused_pair`):
    eagerly, off the CPU."""
    return x.device.type != 'cpu' and not capturing()


def focused_pair(q: torch.Tensor, k: torch.Tensor, s: torch.Tensor,
                 focusing_factor: float, num_heads: int):
    """:func:`focused_features` of ``(B, N, C)`` queries and ``(B, n, C)``
    keys (the kernel acts on each token alone), head-major: ``(B, heads,
    N, C / heads)`` and ``(B, heads, n, C / heads)``, the queries in a
    layout the batched products read as it is. Two calls: the CPU's
    route, and a captured graph's (a compiler fuses each chain)."""
    # Both products would copy the queries: once here.
    return (split_heads(focused_features(q, s, focusing_factor),
                        num_heads).contiguous(),
            split_heads(focused_features(k, s, focusing_factor), num_heads))


def focused_joint(q: torch.Tensor, k: torch.Tensor, s: torch.Tensor,
                  focusing_factor: float, num_heads: int) -> torch.Tensor:
    """:func:`focused_pair`'s features in one call, joined along the
    tokens in the heads' layout: ``(B, heads, N + n, C / heads)``.

    Where kernels launch (a GPU; the meta device the cost model records
    on): each call is some 25 kernels, forward and backward, and a small
    model's eager step is bound by their launches (the calibrated cost
    model: FLatten-PVT-T 48 -> 41 ms); the join is the one copy into the
    layout the products read, and the products' gradients are written
    into one tensor in it (:class:`~vitattn_mm.ops.linear_products.
    JoinedLinearAttention`). Not on the CPU: there the joint copy leaves
    the cache (Swin's stage-1 attention measured 210 -> 270-320 ms).
    """
    both = torch.cat([split_heads(q, num_heads), split_heads(k, num_heads)],
                     dim=-2)
    return focused_features(both, s.reshape(1, num_heads, 1, -1),
                            focusing_factor, channel_dims=(1, 3))


def focused_features_ops(x: torch.Tensor, s: torch.Tensor,
                         focusing_factor: float,
                         channel_dims: Dims = (-1, )) -> torch.Tensor:
    """:func:`focused_features` as plain ops, for autograd to walk back."""
    return _focus(x, s, focusing_factor, channel_dims)[0]


def _focus(x: torch.Tensor, s: torch.Tensor, p: float, dims: Dims):
    """The features ``y``, ``a = (ReLU(x) + eps) / s`` and ``r``, the norm
    of ``a`` over the channel ``dims``."""
    # ReLU in the input's dtype (exact), then fp32 by promotion in the
    # one pass that adds eps / s and divides by s: no pass of its own for
    # the cast, nor one for the addition; eps / s one op, the scalar
    # wrapped. (ONNX has no addcdiv; a captured graph fuses the two ops
    # anyway, and adds eps as an fp32 tensor: a Python scalar would leave
    # a bf16 ReLU in bf16.)
    if capturing():
        a = (F.relu(x) + s.new_full((1, ), 1e-6)) / s
    else:
        a = torch.addcdiv(torch.div(1e-6, s), F.relu(x), s)
    r = torch.linalg.vector_norm(a, dim=dims, keepdim=True)
    f = a**p
    return f * (r / torch.linalg.vector_norm(f, dim=dims, keepdim=True)), a, r


class FocusedFeatures(torch.autograd.Function):
    """:func:`focused_features` with its gradient in closed form.

    With ``a = (ReLU(x) + eps) / s``, ``f = a^p``, ``r = |a|``, ``t = |f|``
    (norms over channels) and ``y = f u`` with ``u = r / t``, for an
    upstream ``g`` and ``w = f . g / t^2`` per token::

        dL/df = u (g - w f)
        dL/da = p a^(p-1) dL/df + w / u a
        dL/dx = dL/da / s where x > 0,   dL/ds = -sum(dL/da a / s)

    written in ``y``, which the products keep anyway: with ``b = w / u =
    (y . g) / r^2`` and ``u a^(p-1) = y / a``, ``dL/da = p (y / a) (g -
    b y) + b a``: neither ``a^(p-1)`` nor ``f`` is recomputed, nor ``u``
    applied (four passes over the features fewer), and no factor leaves
    fp32's range where a token is all ``eps`` (``r`` ~ eps, where ``t`` ~
    eps^p: ``t^2`` may underflow). ``apply(x, s, p, dims)`` returns ``y``,
    then ``a`` and ``r`` (not differentiable, never given a gradient),
    which it saves with the input and ``y``.
    """

    @staticmethod
    def forward(x: torch.Tensor, s: torch.Tensor, p: float, dims: Dims):
        return _focus(x, s, p, dims)

    @staticmethod
    def setup_context(ctx, inputs, output):
        # (Not in forward: the backward ops differentiate the eager
        # composition with torch.func, which needs the split.)
        x, s, ctx.p, ctx.dims = inputs
        y, a, r = output
        ctx.mark_non_differentiable(a, r)
        # No zero maps for the gradients of a and r, which are None.
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x, s, a, r, y)

    @staticmethod
    def backward(ctx, g: torch.Tensor, *_):
        x, s, a, r, y = ctx.saved_tensors
        if g is None:
            return None, None, None, None
        b = (y * g).sum(dim=ctx.dims, keepdim=True) / r / r
        grad_a = torch.addcmul(a * b, y / a,
                               torch.addcmul(g, y, b, value=-1), value=ctx.p)
        grad_x = grad_s = None
        grad = grad_a / s
        if ctx.needs_input_grad[0]:
            # The ReLU's gradient written straight in the input's dtype:
            # one pass (where(x > 0, ...) is three, a cast after it one
            # more).
            grad_x = torch.ops.aten.threshold_backward.grad_input(
                grad, x, 0, grad_input=torch.empty_like(x))
        if ctx.needs_input_grad[1]:
            grad_s = _channel_sums(grad, a, s.shape).neg()
        return grad_x, grad_s, None, None


def _channel_sums(u: torch.Tensor, v: torch.Tensor, shape) -> torch.Tensor:
    """``(u * v)`` summed to ``shape``, the divisor's. Of head-major
    ``(B, heads, N, d)`` maps with one divisor per head and channel (the
    joint route's), the diagonals of each head's ``d x d`` product ``u^T
    v``, summed over the images: one product that reads both maps, where
    a product of the maps writes one and its sum reads it again (its
    FLOPs, ``d`` per entry, are far below the bytes' time; in TF32 where
    the user allows it, as the attention's own products)."""
    if u.dim() == 4 and tuple(shape) == (1, u.shape[1], 1, u.shape[3]):
        return (u.transpose(-2, -1) @ v).diagonal(
            dim1=-2, dim2=-1).sum(0).view(shape)
    return (u * v).sum_to_size(shape)
