"""What the attentions compute with: heads, the one softmax-attention kernel
and the one way of reporting where a softmax query looks.

Windowed calls: the window wrapper batches the windows of each image
consecutively, ``(B * nW, heads, N, d)``, and hands the attentions one
``mask`` per window of an image: Swin's additive shift mask ``(nW, N_q,
N_k)``, or a boolean ``(nW, N_q | 1, N_k)`` of the keys each query may see
(True: attend). Every function here takes that mask and views the batch as
``(B, nW, ...)`` itself, so no attention reshapes for it.
"""
from typing import Optional, Tuple

import torch
import torch.nn.functional as F

# The heads' layout lives with the layers (the custom ops use it too).
from ..layers.common import merge_heads, split_heads
from ..layers.size_aware import aligned_rows
from .base import Grid, QueryAttention

__all__ = [
    'check_heads', 'split_heads', 'merge_heads', 'window_logit_bias',
    'add_logit_bias', 'masked_softmax', 'attention_logits',
    'softmax_attention', 'softmax_query'
]


def check_heads(embed_dims: int, num_heads: int) -> int:
    """Channels per head; a clear error when the heads do not divide C."""
    if embed_dims % num_heads:
        raise ValueError(f'embed_dims {embed_dims} is not divisible by '
                         f'num_heads {num_heads}')
    return embed_dims // num_heads


def window_logit_bias(bias: Optional[torch.Tensor],
                      mask: Optional[torch.Tensor],
                      batch: int) -> Optional[torch.Tensor]:
    """``bias`` and a per-window ``mask`` as one term of ``(B, nW, heads,
    N_q, N_k)`` logits, ``batch = B * nW`` (see the module docstring).

    ``bias`` is ``(heads, N_q, N_k)``, one per window ``(B * nW, heads,
    N_q | 1, N_k)`` (viewed per window like the logits) or one per image
    ``(B, 1, heads, N_q, N_k)``. A boolean mask stays boolean when there
    is no bias."""
    if mask is None:
        return bias
    if bias is not None and bias.dim() == 4 and bias.shape[0] == batch:
        bias = bias.unflatten(0, (-1, mask.shape[0]))
    mask = mask[:, None]  # (nW, 1, N_q | 1, N_k): every head
    if bias is None:
        return mask
    if mask.dtype == torch.bool:
        return torch.where(mask, bias, float('-inf'))
    return bias + mask


def _by_window(mask: Optional[torch.Tensor],
               *tensors: torch.Tensor) -> Tuple[torch.Tensor, ...]:
    """``(B * nW, ...)`` tensors as ``(B, nW, ...)`` when there is a
    per-window mask."""
    if mask is None:
        return tensors
    return tuple(t.unflatten(0, (-1, mask.shape[0])) for t in tensors)


def add_logit_bias(logits: torch.Tensor, bias: Optional[torch.Tensor],
                   mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``logits + bias`` (+ the per-window ``mask``) for ``(B * nW, heads,
    N_q, N_k)`` logits, ``bias`` as :func:`softmax_attention` takes it."""
    term = window_logit_bias(bias, mask, logits.shape[0])
    if term is None:
        return logits
    if mask is None:
        return logits + term
    logits, = _by_window(mask, logits)
    if term.dtype == torch.bool:
        logits = logits.masked_fill(~term, float('-inf'))
    else:
        logits = logits + term
    return logits.flatten(0, 1)


def masked_softmax(logits: torch.Tensor,
                   mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Softmax over the keys of ``(B * nW, heads, N_q, N_k)`` logits, with
    the per-window ``mask``, in the logits' dtype.

    The dtype is named so that autocast keeps it: bf16 logits then give a
    bf16 map in one kernel (accumulated in fp32), the values it would have
    been cast to before the product with ``v`` anyway, instead of an fp32
    map as large as the logits, two casts and their gradients. The
    backward reads the rounded map (as flash attention's never keeps one).
    """
    logits = add_logit_bias(logits, None, mask)
    return logits.softmax(dim=-1, dtype=logits.dtype)


def attention_logits(q: torch.Tensor, k: torch.Tensor,
                     bias: Optional[torch.Tensor] = None,
                     scale: Optional[float] = None) -> torch.Tensor:
    """``q k^T * scale + bias`` of ``(B, heads, N, d)`` queries and keys,
    written out (``bias`` as :func:`softmax_attention` takes it, without a
    mask)."""
    scale = q.shape[-1]**-0.5 if scale is None else scale
    return add_logit_bias((q * scale) @ k.transpose(-2, -1),
                          None if bias is None else bias.to(q.dtype))


def softmax_attention(q: torch.Tensor,
                      k: torch.Tensor,
                      v: torch.Tensor,
                      bias: Optional[torch.Tensor] = None,
                      mask: Optional[torch.Tensor] = None,
                      scale: Optional[float] = None,
                      dropout_p: float = 0.,
                      fused: bool = True) -> torch.Tensor:
    """``softmax(q k^T * scale + bias + mask) v`` over ``(B, heads, N, d)``.

    The one softmax-attention kernel of the package: PyTorch's fused
    ``scaled_dot_product_attention`` (which both ONNX exporters translate
    at symbolic sizes), or with ``fused=False`` the same written as matmul,
    softmax, matmul. On a GPU the fused kernel needs 4-D inputs: windows
    with a per-window mask get their bias broadcast to the batch, padded to
    aligned rows first (:func:`aligned_rows`).

    Args:
        q (Tensor): ``(B, heads, N_q, d)`` queries.
        k (Tensor): ``(B, heads, N_k, d)`` keys.
        v (Tensor): ``(B, heads, N_k, d_v)`` values.
        bias (Tensor, optional): Additive logits, broadcastable to
            ``(B, heads, N_q, N_k)``; with ``mask``, see
            :func:`window_logit_bias`. Default: None.
        mask (Tensor, optional): One mask per window of an image, the
            batch holding each image's windows consecutively (see the
            module docstring). Default: None.
        scale (float, optional): Default: ``d ** -0.5``.
        dropout_p (float): Dropout of the attention weights. Default: 0.
        fused (bool): Use the fused kernel. Default: True.

    Returns:
        Tensor: ``(B, heads, N_q, d_v)``.
    """
    if not fused:
        probs = masked_softmax(attention_logits(q, k, bias, scale), mask)
        if dropout_p:
            probs = F.dropout(probs, dropout_p)
        return probs.to(v.dtype) @ v
    term = window_logit_bias(bias, mask, q.shape[0])
    if term is not None:
        keys = term.shape[-1]
        if term.dtype != torch.bool:
            term = aligned_rows(term.to(q.dtype))
        if mask is not None:  # per image's windows -> per batch entry
            term = term.expand(q.shape[0] // mask.shape[0],
                               *term.shape[-4:]).flatten(0, 1)
        term = term[..., :keys]
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=term, dropout_p=dropout_p, scale=scale)


def softmax_query(q: torch.Tensor,
                  k: torch.Tensor,
                  index: int,
                  key_hw: Grid,
                  scale: float,
                  bias: Optional[torch.Tensor] = None,
                  extra_tokens: int = 0) -> QueryAttention:
    """Where query ``index`` looks under ``softmax(q k^T * scale + bias)``:
    what every softmax attention's ``query_attention`` returns.

    Args:
        q (Tensor): ``(heads, N_q, d)`` queries of one image.
        k (Tensor): ``(heads, N_k, d)`` keys.
        index (int): The query's place on the grid.
        key_hw (tuple[int, int]): Grid of the keys.
        scale (float): Logit scale.
        bias (Tensor, optional): ``(heads, N_k)``: the query's additive
            logits (relative position bias, a key-norm term, ``-inf``
            outside its window). Default: None.
        extra_tokens (int): Leading tokens outside the grid (a class
            token) among queries and keys: the query is ``extra_tokens +
            index``, and the weights are drawn over the grid's keys,
            renormalised. Default: 0.
    """
    query = q[:, extra_tokens + index]
    logits = (query[:, None] * scale) @ k.transpose(-2, -1)
    logits = logits[:, 0]
    if bias is not None:
        logits = logits + bias
    weights = logits.softmax(-1)
    if extra_tokens:
        weights = weights[:, extra_tokens:]
        weights = weights / weights.sum(-1, keepdim=True)
        k = k[:, extra_tokens:]
    return QueryAttention(weights, tuple(key_hw), query, k, scale)
