"""The Diagonality-Preserving loss of Less-Attention maps (paper Eq. 8-10),
in our bounded form and as the paper prints it."""
from typing import Optional, Sequence

import torch

from ....ops import (MAX_SIDE, diagonality_loss_op, diagonality_terms,
                     pool_queries, pooled_diagonality_loss_op,
                     pooled_op_takes, pooled_probabilities, uses_fused_op)
from ...layers.common import at_least_fp32, full_precision
from ..base import Grid


def diagonality_preserving_loss(logits: torch.Tensor,
                                query_hw: Grid,
                                key_hw: Grid,
                                attn_backend: str = 'eager',
                                probs: Optional[torch.Tensor] = None
                                ) -> torch.Tensor:
    """Diagonality-Preserving loss of one attention map (paper Eq. 8-9).

    Eq. 9 as printed sums raw logits and rewards a *smaller* diagonal; we
    keep its intent, a symmetric map whose diagonal dominates each row, in a
    bounded form that does not depend on the resolution:

    * ``P = softmax(logits)`` in fp32; with ``N_q != N_k`` the queries are
      average-pooled onto the key grid, giving an ``N_k x N_k`` map whose
      rows still sum to 1 (row i: the attention of the queries in key cell
      i);
    * symmetry: ``mean_i sum_j |P_ij - P_ji| / 2`` (in [0, 1]);
    * diagonality: ``mean_i relu(max_{j != i} P_ij - P_ii) / max_j P_ij``
      (in [0, 1]; 0 when every diagonal entry is its row's maximum).

    Means over rows, heads and images, never sums, so the value does not
    grow with the number of tokens.

    Args:
        logits (Tensor): Pre-softmax attention ``(B, heads, N_q, N_k)``.
        query_hw (tuple[int, int]): Query grid (``N_q`` tokens).
        key_hw (tuple[int, int]): Key grid (``N_k`` tokens).
        attn_backend (str): Where it chooses the fused ops, one pass each
            way: square maps of side up to 64 (Swin's windows,
            :func:`~vitattn_mm.ops.diagonality_loss_op`), and pooled maps
            (LaViT) and larger square ones of up to 4096 keys
            (:func:`~vitattn_mm.ops.pooled_diagonality_loss_op`).
            Default: 'eager'.
        probs (Tensor, optional): ``softmax(logits)`` as the layer wrote it
            (its eager softmax; bf16 under bf16 autocast): the eager loss
            reads it (pooled in fp32 where ``N_q != N_k``, its sums in
            fp32) instead of an fp32 softmax of the logits of its own. The
            fused ops read the logits. Default: None.

    Returns:
        Tensor: fp32 scalar (fp64 for fp64 logits), symmetry +
        diagonality terms.
    """
    loss = fused_diagonality_loss(logits, query_hw, key_hw, attn_backend)
    if loss is not None:
        return loss
    with full_precision(logits):
        return diagonality_terms(
            eager_diagonality_map(logits, query_hw, key_hw, probs))


def fused_diagonality_loss(logits: torch.Tensor, query_hw: Grid,
                           key_hw: Grid,
                           attn_backend: str) -> Optional[torch.Tensor]:
    """:func:`diagonality_preserving_loss` by a fused op, where
    ``attn_backend`` chooses one and one takes the map; else None."""
    if not uses_fused_op(attn_backend, logits.device):
        return None
    if tuple(query_hw) == tuple(key_hw) and logits.shape[-1] <= MAX_SIDE:
        return diagonality_loss_op(logits)
    # Larger square maps too: pooled onto their own grid, bins of one.
    if pooled_op_takes(query_hw, key_hw):
        return pooled_diagonality_loss_op(logits, list(query_hw),
                                          list(key_hw))
    return None


def eager_diagonality_map(logits: torch.Tensor, query_hw: Grid,
                          key_hw: Grid,
                          probs: Optional[torch.Tensor] = None
                          ) -> torch.Tensor:
    """The row-stochastic ``(B, heads, N_k, N_k)`` map whose terms the
    eager loss takes: ``probs`` (pooled onto the key grid already, or
    pooled here where the grids differ), else a softmax of the
    logits in fp32 (fp64 logits in fp64), pooled likewise."""
    if tuple(query_hw) != tuple(key_hw):
        return pooled_probabilities(logits, query_hw, key_hw, probs)
    if probs is not None:
        return probs
    with full_precision(logits):
        return at_least_fp32(logits).softmax(dim=-1)


def mean_diagonality_preserving_loss(maps: Sequence[tuple]
                                     ) -> torch.Tensor:
    """The mean of :func:`diagonality_preserving_loss` over ``maps``,
    each weighted: ``(logits, query_hw, key_hw, weight, attn_backend,
    probs)`` each.

    The eager loss's maps of one shape, dtype and weight (a stage's LA
    layers) are stacked and their terms taken in one call: a map's terms
    are a mean over its rows, so the stack's mean is the maps' mean. Each
    call is some 25 ops, most of them on a few numbers per row, and a
    GPU's eager step at a detector's batch is bound by their launches
    (LaViT-S: 6 maps, 2 calls). The stack is one copy of the maps."""
    total, groups = [], {}
    for logits, query_hw, key_hw, weight, attn_backend, probs in maps:
        loss = fused_diagonality_loss(logits, query_hw, key_hw,
                                      attn_backend)
        if loss is not None:
            total.append(weight * loss)
            continue
        m = eager_diagonality_map(logits, query_hw, key_hw, probs)
        groups.setdefault((m.shape, m.dtype, m.device, weight),
                          []).append(m)
    for (*_, weight), group in groups.items():
        stacked = group[0] if len(group) == 1 else torch.stack(group)
        with full_precision(stacked):
            total.append(weight * len(group) * diagonality_terms(stacked))
    return sum(total) / len(maps)


def paper_diagonality_loss(logits: torch.Tensor,
                           query_hw: Grid,
                           key_hw: Grid,
                           attn_backend: str = 'eager',
                           probs: Optional[torch.Tensor] = None
                           ) -> torch.Tensor:
    """Diagonality-Preserving loss of one map as the paper prints it
    (Eq. 9), for reproducing the paper as written.

    On the pre-softmax map ``A``: ``sum_ij |A_ij - A_ji| + sum_i ((N - 1)
    A_ii - sum_{j != i} A_ij)``, summed over the heads and averaged over the
    images. It is unbounded below (growing the off-diagonal logits lowers
    it without limit) and grows with the number of tokens; docs/lavit.md
    measures what that does to training. With ``N_q != N_k`` the queries
    are average-pooled onto the key grid first, as in
    :func:`diagonality_preserving_loss`.

    Args:
        logits (Tensor): Pre-softmax attention ``(B, heads, N_q, N_k)``.
        query_hw (tuple[int, int]): Query grid (``N_q`` tokens).
        key_hw (tuple[int, int]): Key grid (``N_k`` tokens).
        attn_backend (str): Taken for a uniform call; this form runs
            eagerly. Default: 'eager'.
        probs (Tensor, optional): Taken for a uniform call; this form
            reads the logits. Default: None.

    Returns:
        Tensor: fp32 scalar (fp64 for fp64 logits).
    """
    Nk = logits.shape[-1]
    with full_precision(logits):
        A = at_least_fp32(logits)
        if tuple(query_hw) != tuple(key_hw):
            A = pool_queries(A, query_hw, key_hw)
        symmetry = (A - A.transpose(-2, -1)).abs().sum((-2, -1))
        diag = A.diagonal(dim1=-2, dim2=-1)
        off_diag = A.sum(-1) - diag
        diagonality = ((Nk - 1) * diag - off_diag).sum(-1)
    return (symmetry + diagonality).sum(1).mean()


#: ``dp_loss_form`` -> the loss of one LA map.
DP_LOSS_FORMS = {
    'bounded': diagonality_preserving_loss,
    'paper': paper_diagonality_loss,
}
