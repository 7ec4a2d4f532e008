"""The products of the linear attentions' eager compositions: the state
``[k^T v, sum(k)]`` and the normalised output, and for queries and keys
joined along the tokens (FLatten's GPU route) the same with its gradient
written out."""
import torch


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
                                v: torch.Tensor, eps: float) -> torch.Tensor:
    """``q (k^T v) / (q . sum(k) + eps)`` per head of fp32 ``(B, heads,
    N, d)`` queries, ``(B, heads, n, d)`` keys and values (any float
    dtype): fp32 ``(B, heads, N, d)``."""
    out, denominator = (q @ linear_state(k, v)[0]).split([v.shape[-1], 1], -1)
    # A product, not a division: the division's gradient is five passes
    # over the output, the product's three.
    return out * torch.reciprocal(denominator + eps)


class JoinedLinearAttention(torch.autograd.Function):
    """:func:`normalised_linear_attention` of queries and keys joined
    along the tokens, ``(B, heads, N + n, d)`` fp32 features (the first
    ``num_queries`` the queries), with its gradient written out.

    With the state ``S = [k^T v, sum(k)]``, ``P = q S = [o, m]`` and the
    output ``y = o / (m + eps)``, for an upstream ``g``::

        dP = [g / (m + eps), -(g / (m + eps)) . y],
        dq = dP S^T,   dS = q^T dP,   dk = [v, 1] dS^T,   dv = k dS

    (``dv`` the first d columns). Autograd writes each of ``dP`` and the
    features' gradient in two parts and concatenates them (a pass over
    each); here the products write into one tensor each, and the
    division needs no reciprocal. ``apply(features, v, num_queries,
    eps)`` returns the output, then the state, ``m + eps`` and the values
    the state read where they are a copy (not differentiable; saved).
    """

    @staticmethod
    def forward(features: torch.Tensor, v: torch.Tensor, num_queries: int,
                eps: float):
        q, k = features.split(
            [num_queries, features.shape[-2] - num_queries], dim=-2)
        state, values = linear_state(k, v)
        product = q @ state
        denominator = product[..., -1:] + eps
        return (product[..., :-1] / denominator, state, denominator,
                None if values is v else values)

    @staticmethod
    def setup_context(ctx, inputs, output):
        features, v, ctx.num_queries, _ = inputs
        out, state, denominator, values = output
        ctx.mark_non_differentiable(state, denominator,
                                    *(() if values is None else (values, )))
        ctx.set_materialize_grads(False)
        ctx.values_dtype = v.dtype
        ctx.save_for_backward(features, v if values is None else values,
                              state, denominator, out)

    @staticmethod
    def backward(ctx, grad: torch.Tensor, *_):
        features, values, state, denominator, out = ctx.saved_tensors
        if grad is None:
            return None, None, None, None
        N = ctx.num_queries
        d = state.shape[-2]
        grad_product = torch.empty(*out.shape[:-1], d + 1,
                                   dtype=out.dtype, device=out.device)
        grad_out = torch.div(grad, denominator, out=grad_product[..., :-1])
        torch.neg((grad_out * out).sum(-1, keepdim=True),
                  out=grad_product[..., -1:])
        # Batched matrices as (B * heads, rows, columns) views, so that
        # each product writes its part of one gradient.
        rows, cols = features.flatten(0, 1), grad_product.flatten(0, 1)
        state, values = state.flatten(0, 1), values.flatten(0, 1)
        grad_features = torch.empty_like(features)
        both = grad_features.flatten(0, 1)
        torch.bmm(cols, state.transpose(1, 2), out=both[:, :N])
        grad_state = rows[:, :N].transpose(1, 2) @ cols
        if values.shape[-1] > d:  # [v, 1]: the ones give the keys' sum
            torch.bmm(values, grad_state.transpose(1, 2), out=both[:, N:])
        else:
            torch.baddbmm(grad_state[:, :, -1:].transpose(1, 2), values,
                          grad_state[:, :, :-1].transpose(1, 2),
                          out=both[:, N:])
        grad_v = rows[:, N:] @ grad_state[:, :, :-1]
        grad_v = grad_v.view(*features.shape[:2], *grad_v.shape[1:])
        return (grad_features, grad_v.to(ctx.values_dtype), None, None)
