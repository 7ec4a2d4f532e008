"""What a registered attention reports about itself, for tools that draw or
analyse attention (``tools/visualize_attention.py``) without re-deriving
each family's formula."""
from dataclasses import dataclass
from typing import Tuple

import torch


@dataclass
class QueryAttention:
    """Where one query token looks, as the attention module computes it.

    Returned by ``attn.query_attention(x, hw_shape, index)`` of a token
    attention, for the first image of ``x`` (the module's input).

    Args:
        weights (Tensor): ``(heads, N_k)``: the weights the module mixes the
            values with for this query (rows sum to 1, or less where the
            module's normaliser is clamped, e.g. L2ViT's).
        key_hw (tuple[int, int]): Grid of the ``N_k`` keys.
        query (Tensor): ``(heads, d)``: the query's projected features.
        keys (Tensor): ``(heads, N_k, d)``: the keys' projected features
            (positional encodings included), so a dot-product softmax over
            the same projections can be drawn beside ``weights``.
        scale (float): Scale of that dot-product softmax (``d ** -0.5``).
    """
    weights: torch.Tensor
    key_hw: Tuple[int, int]
    query: torch.Tensor
    keys: torch.Tensor
    scale: float


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``(B, N, C)`` -> ``(B, heads, N, C / heads)``."""
    B, N, C = x.shape
    return x.reshape(B, N, num_heads, C // num_heads).transpose(1, 2)
