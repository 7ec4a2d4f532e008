"""The products of the linear attentions' eager compositions: the state
``[k^T v, sum(k)]`` and the normalised output as plain ops (what a
captured graph runs), and as autograd functions with their gradient
written out for queries and keys joined along the tokens
(:class:`JoinedLinearAttention`: FLatten's GPU route) and for L2ViT's
whole attention from its projection (:class:`ReluLinearAttention`)."""
from typing import Optional

import torch

from ..models.layers.common import merge_heads
from ..models.layers.size_aware import capturing


def with_ones(v: torch.Tensor) -> torch.Tensor:
    """``(..., d)`` values with a column of ones, in fp32 at least: a
    product of the keys with them gives ``k^T v`` and the keys' sum
    together. One copy, which casts (cat promotes), and whose gradient is
    a view (a pad's is a copy)."""
    ones = torch.ones(1, device=v.device).expand(*v.shape[:-1], 1)
    return torch.cat([v, ones], dim=-1)


def linear_state(k: torch.Tensor, v: torch.Tensor):
    """The state ``[k^T v, sum(k)]`` of fp32 keys and the values, and the
    values the product read (fp32).

    One product with the queries gives ``q (k^T v)`` and the normaliser
    ``q . sum(k)`` together (a product of its own reads the queries again,
    and its gradient adds a map to theirs). Where the values need their
    fp32 copy (bf16 / fp16) a column of ones rides in that copy, so the
    keys' product gives their sum (and its gradient adds nothing to
    theirs); fp32 values are read as they are, with the keys' sum."""
    if v.dtype == torch.float32:
        return torch.cat([k.transpose(-2, -1) @ v,
                          k.sum(dim=-2).unsqueeze(-1)], dim=-1), v
    values = with_ones(v)
    return k.transpose(-2, -1) @ values, values


def normalised_linear_attention(q: torch.Tensor, k: torch.Tensor,
                                v: torch.Tensor, eps: float,
                                temperature: Optional[torch.Tensor] = None,
                                floor: Optional[float] = None
                                ) -> torch.Tensor:
    """``q (k^T v) / (q . sum(k) + eps)`` per head of fp32 ``(B, heads,
    N, d)`` queries, ``(B, heads, n, d)`` keys and values (any float
    dtype): fp32 ``(B, heads, N, d)``; given a ``temperature`` (``(heads,
    1, 1)``) and a ``floor``, L2ViT's ``T q (k^T v) / max(q . sum(k),
    floor)``. Plain ops, for autograd to walk back."""
    out, denominator = (q @ linear_state(k, v)[0]).split([v.shape[-1], 1],
                                                         -1)
    # A product, not a division: the division's gradient is five passes
    # over the output, the product's three.
    if temperature is None:
        return out * torch.reciprocal(denominator + eps)
    return out * (temperature / denominator.clamp(min=floor))


def joined_linear_attention(features: torch.Tensor, v: torch.Tensor,
                            num_queries: int, eps: float,
                            temperature: Optional[torch.Tensor] = None,
                            floor: Optional[float] = None,
                            residual: Optional[torch.Tensor] = None
                            ) -> torch.Tensor:
    """:func:`normalised_linear_attention` of queries and keys joined
    along the tokens (``(B, heads, N + n, d)``, the first ``num_queries``
    the queries): eagerly :class:`JoinedLinearAttention`, its gradient
    written out; while a graph is captured the plain ops (a compiler
    fuses them; an ONNX graph has no backward).

    Given a ``residual`` (``(B, heads, N, d)``; FLatten's depthwise conv
    of the values, without a temperature), the output plus it with the
    heads merged: ``(B, N, heads * d)`` in the dtype of ``v`` and
    ``residual`` promoted (:func:`merged_with_residual`)."""
    if capturing():
        q, k = features.split(
            [num_queries, features.shape[-2] - num_queries], dim=-2)
        out = normalised_linear_attention(q, k, v, eps, temperature, floor)
        return out if residual is None else merged_with_residual(
            out, residual, v.dtype)
    return JoinedLinearAttention.apply(features, v, num_queries, eps,
                                       temperature, floor, residual)[0]


def merged_with_residual(out: torch.Tensor, residual: torch.Tensor,
                         dtype: torch.dtype) -> torch.Tensor:
    """``(B, heads, N, d)`` fp32 ``out`` plus ``residual``, heads merged:
    ``(B, N, heads * d)`` in ``dtype`` and the residual's promoted. The
    sum in fp32, rounded once (the plain ops of what
    :class:`JoinedLinearAttention` writes in its normalising pass)."""
    return merge_heads(out + residual,
                       torch.promote_types(dtype, residual.dtype))


def _products(features: torch.Tensor, v: torch.Tensor, num_queries: int,
              eps: float, temperature: Optional[torch.Tensor],
              floor: Optional[float],
              residual: Optional[torch.Tensor] = None,
              merged_dtype: Optional[torch.dtype] = None):
    """:class:`JoinedLinearAttention`'s forward: the output, then the
    state, the denominator, the values the state read where they are a
    copy (else None) and ``P``. Given a ``merged_dtype`` (L2ViT's, or
    FLatten's with its ``residual`` added), the output is written with
    the heads merged, in that dtype: the normalising pass writes it where
    an fp32 output would be cast, merged (and added to) in passes of
    their own, and its gradient cast back."""
    q, k = features.split([num_queries, features.shape[-2] - num_queries],
                          dim=-2)
    state, values = linear_state(k, v)
    product = q @ state
    values = None if values is v else values
    o = product[..., :-1]
    if temperature is not None:
        denominator = product[..., -1:].clamp(min=floor)
        scale = temperature / denominator
        out = o * scale if merged_dtype is None else _token_major(torch.mul(
            o, scale, out=_merged_out(o, merged_dtype)))
        return out, state, denominator, values, product
    denominator = product[..., -1:] + eps
    if residual is None:
        return o / denominator, state, denominator, values, product
    out = _token_major(torch.addcdiv(residual, o, denominator,
                                     out=_merged_out(o, merged_dtype)))
    return out, state, denominator, values, product


def _merged_out(heads: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A new ``(B, N, heads * d)`` tensor in ``dtype``, as a ``(B, heads,
    N, d)`` view the shape of ``heads``, for an op to write into."""
    B, h, N, d = heads.shape
    return heads.new_empty(B, N, h, d, dtype=dtype).transpose(1, 2)


def _token_major(view: torch.Tensor) -> torch.Tensor:
    """The ``(B, N, heads * d)`` tensor behind a :func:`_merged_out` view."""
    return view.transpose(1, 2).flatten(2)


def _products_backward(grad, features, values, state, denominator, out,
                       temperature, num_queries: int, floor):
    """:class:`JoinedLinearAttention`'s backward (``grad``: ``(B, heads,
    N, d)``, any float dtype and strides; ``out``: ``o``, the product
    before its normaliser): the features' gradient, the values' (fp32,
    ``(B, heads, n, d)``) and the temperature's (None without)."""
    N = num_queries
    d = state.shape[-2]
    grad_product = torch.empty(*out.shape[:-1], d + 1, dtype=out.dtype,
                               device=out.device)
    grad_temperature = None
    if temperature is None:
        # -(g . y) / (m + eps) = -(g c . o) c
        grad_out = torch.div(grad, denominator, out=grad_product[..., :-1])
        torch.div((grad_out * out).sum(-1, keepdim=True), denominator,
                  out=grad_product[..., -1:]).neg_()
    else:
        scale = temperature / denominator
        torch.mul(grad, scale, out=grad_product[..., :-1])
        # (g . o) / max(m, floor) per token: T's gradient summed, and
        # times -c the normaliser's, which the clamp stops at the floor.
        ratio = (grad * out).sum(-1, keepdim=True) / denominator
        grad_temperature = ratio.sum((0, 2)).view(temperature.shape).to(
            temperature.dtype)
        torch.mul(ratio, scale, out=grad_product[..., -1:]).masked_fill_(
            denominator <= floor, 0.).neg_()
    # Batched matrices as (B * heads, rows, columns) views, so that each
    # product writes its part of one gradient.
    rows, cols = features.flatten(0, 1), grad_product.flatten(0, 1)
    state, values = state.flatten(0, 1), values.flatten(0, 1)
    # Contiguous, whatever the features' strides: the products write
    # into views of it.
    grad_features = torch.empty(features.shape, dtype=features.dtype,
                                device=features.device)
    both = grad_features.flatten(0, 1)
    torch.bmm(cols, state.transpose(1, 2), out=both[:, :N])
    grad_state = rows[:, :N].transpose(1, 2) @ cols
    if values.shape[-1] > d:  # [v, 1]: the ones give the keys' sum
        torch.bmm(values, grad_state.transpose(1, 2), out=both[:, N:])
    else:
        torch.baddbmm(grad_state[:, :, -1:].transpose(1, 2), values,
                      grad_state[:, :, :-1].transpose(1, 2), out=both[:, N:])
    grad_v = rows[:, N:] @ grad_state[:, :, :-1]
    return (grad_features,
            grad_v.view(*features.shape[:2], *grad_v.shape[1:]),
            grad_temperature)


class JoinedLinearAttention(torch.autograd.Function):
    """:func:`normalised_linear_attention` of queries and keys joined
    along the tokens, ``(B, heads, N + n, d)`` fp32 features (the first
    ``num_queries`` the queries), FLatten's or (given a ``temperature``
    and a ``floor``) L2ViT's, with its gradient written out.

    With the state ``S = [k^T v, sum(k)]``, ``P = q S = [o, m]``, the
    output ``y = o c`` with ``c = 1 / (m + eps)`` (or ``T / max(m,
    floor)``), for an upstream ``g``::

        dP = [g c, -(g c . o) c]   (or -(g . o) c / m, 0 at the floor;
                                    dT = sum (g . o) / m)
        dq = dP S^T,   dS = q^T dP,   dk = [v, 1] dS^T,   dv = k dS

    (``dv`` the first d columns). Autograd writes each of ``dP`` and the
    features' gradient in two parts and concatenates them (a pass over
    each); here the products write into one tensor each, and FLatten's
    division needs no reciprocal. Given a ``residual`` (FLatten), the
    output is ``y`` plus it, heads merged, in the residual's dtype
    (:func:`joined_linear_attention`), whose gradient is the upstream as
    it is. ``apply(features, v, num_queries, eps, temperature, floor,
    residual)`` returns the output, then the state, the denominator, the
    values the state read where they are a copy, and ``P`` (not
    differentiable; saved).
    """

    @staticmethod
    def forward(features: torch.Tensor, v: torch.Tensor, num_queries: int,
                eps: float, temperature: Optional[torch.Tensor] = None,
                floor: Optional[float] = None,
                residual: Optional[torch.Tensor] = None):
        return _products(features, v, num_queries, eps, temperature, floor,
                         residual, None if residual is None else
                         torch.promote_types(v.dtype, residual.dtype))

    @staticmethod
    def setup_context(ctx, inputs, output):
        features, v, ctx.num_queries, _, temperature, ctx.floor, \
            residual = inputs
        _, state, denominator, values, product = output
        ctx.mark_non_differentiable(
            *(t for t in output[1:] if t is not None))
        ctx.set_materialize_grads(False)
        ctx.values_dtype = v.dtype
        ctx.residual = None if residual is None else (residual.shape,
                                                      residual.dtype)
        ctx.save_for_backward(
            features, v if values is None else values, state, denominator,
            product[..., :-1], temperature)

    @staticmethod
    def backward(ctx, grad: torch.Tensor, *_):
        if grad is None:
            return None, None, None, None, None, None, None
        grad_residual = None
        if ctx.residual is not None:
            (B, h, N, d), dtype = ctx.residual
            grad = grad.reshape(B, N, h, d).transpose(1, 2)
            grad_residual = grad.to(dtype)
        grad_features, grad_v, grad_temperature = _products_backward(
            grad, *ctx.saved_tensors, ctx.num_queries, ctx.floor)
        return (grad_features, grad_v.to(ctx.values_dtype), None, None,
                grad_temperature, None, grad_residual)


def relu_linear_attention(qkv: torch.Tensor, temperature: torch.Tensor,
                          num_heads: int, floor: float) -> torch.Tensor:
    """L2ViT's ``T relu(q) (relu(k)^T v) / max(relu(q) . sum relu(k),
    floor)`` from the packed ``(B, N, 3C)`` projection: ``(B, N, C)``,
    the heads merged, in the dtype of ``qkv``. Eagerly
    :class:`ReluLinearAttention`, its gradient written out; while a graph
    is captured the plain ops."""
    if capturing():
        _, features, v = _relu_joined(qkv, num_heads)
        return merge_heads(joined_linear_attention(
            features, v, qkv.shape[1], 0., temperature, floor), qkv.dtype)
    return ReluLinearAttention.apply(qkv, temperature, num_heads, floor)[0]


def _parts(qkv: torch.Tensor, num_heads: int) -> torch.Tensor:
    """The packed projection as ``(B, N, 3, heads, d)``."""
    B, N, width = qkv.shape
    return qkv.reshape(B, N, 3, num_heads, width // 3 // num_heads)


def _relu_joined(qkv: torch.Tensor, num_heads: int):
    """``relu`` of queries and keys in the input's dtype (exact; ``(B, N,
    2, heads, d)``), the same cast to fp32 and written head-major, joined
    along the tokens, in one copy (``(B, heads, 2N, d)``), and the values'
    ``(B, heads, N, d)`` view."""
    qk, v = _parts(qkv, num_heads).split([2, 1], dim=2)
    positive = torch.relu(qk)
    features = positive.permute(0, 3, 2, 1, 4).to(
        torch.float32, memory_format=torch.contiguous_format).flatten(2, 3)
    return positive, features, v.squeeze(2).transpose(1, 2)


class ReluLinearAttention(torch.autograd.Function):
    """L2ViT's linear attention from the packed ``(B, N, 3C)``
    projection: ``relu`` of queries and keys, cast to fp32 head-major
    joined along the tokens in one copy, then :class:`JoinedLinearAttention`'s
    products; its gradient written out into the projection's in two
    passes (the ReLU's gradient, cast, into the queries' and keys' part;
    the values' cast into theirs), where autograd cast, masked, cast and
    concatenated.

    ``apply(qkv, temperature, num_heads, floor)`` returns the ``(B, N,
    C)`` output in the dtype of ``qkv`` (the scaling's pass writes it, the
    heads merged), then what it saves (not differentiable).
    """

    @staticmethod
    def forward(qkv: torch.Tensor, temperature: torch.Tensor,
                num_heads: int, floor: float):
        positive, features, v = _relu_joined(qkv, num_heads)
        out, *rest = _products(features, v, qkv.shape[1], 0., temperature,
                               floor, merged_dtype=qkv.dtype)
        return (out, positive, features, *rest)

    @staticmethod
    def setup_context(ctx, inputs, output):
        qkv, temperature, ctx.num_heads, ctx.floor = inputs
        _, positive, features, state, denominator, values, product = output
        ctx.mark_non_differentiable(
            *(t for t in output[1:] if t is not None))
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(qkv, positive, features, values, state,
                              denominator, product, temperature)

    @staticmethod
    def backward(ctx, grad: torch.Tensor, *_):
        if grad is None:
            return None, None, None, None
        qkv, positive, features, values, state, denominator, product, \
            temperature = ctx.saved_tensors
        B, N, width = qkv.shape
        grad = grad.reshape(B, N, ctx.num_heads, -1).transpose(1, 2)
        if values is None:  # fp32 values, read where they are
            values = _parts(qkv, ctx.num_heads)[:, :, 2].transpose(1, 2)
        grad_features, grad_v, grad_temperature = _products_backward(
            grad, features, values, state, denominator, product[..., :-1],
            temperature, N, ctx.floor)
        grad_qkv = torch.empty(B, N, 3, *positive.shape[-2:],
                               dtype=qkv.dtype, device=qkv.device)
        torch.ops.aten.threshold_backward.grad_input(
            grad_features.view(B, positive.shape[-2], 2, N,
                               -1).permute(0, 3, 2, 1, 4), positive, 0,
            grad_input=grad_qkv[:, :, :2])
        grad_qkv[:, :, 2] = grad_v.transpose(1, 2)
        return grad_qkv.view(B, N, width), grad_temperature, None, None
