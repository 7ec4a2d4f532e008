"""The bounded Diagonality-Preserving loss as custom ops: of square score
maps (``torch.ops.vitattn.diagonality_loss``, Less-Attention's loss on the
maps of Swin's windows), and of maps whose queries are pooled onto the key
grid first (``torch.ops.vitattn.pooled_diagonality_loss``, LaViT's maps
with spatially reduced keys); one pass over the maps each way where the
eager composition takes a dozen ops (an fp32 softmax, the pooling, the map
against its transpose, a masked fill, two row maxima ... and their
gradients). As
:mod:`.linear_attention`: the eager composition is the reference and the
CPU path, the shape function serves ``torch.compile`` and the cost model,
the kernels (:mod:`.triton_diagonality_loss`) run on CUDA and under
``TRITON_INTERPRET=1``.
"""
from typing import List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable
from torch.utils.flop_counter import register_flop_formula

from ..models.layers.common import at_least_fp32, full_precision
from ..models.layers.size_aware import capturing
from .backend import kernels_run_on
from .common import block_d, eager_grads, save_inputs, saved_inputs

#: The largest map side the op takes (its kernels' tile).
MAX_SIDE = 64
#: The most keys the pooled op takes (a softmax row is one tile).
MAX_POOLED_KEYS = 4096


def diagonality_terms(probs: torch.Tensor) -> torch.Tensor:
    """Symmetry + diagonality of row-stochastic ``(..., N, N)`` maps (see
    :func:`~vitattn_mm.models.attentions.less_attention.loss.
    diagonality_preserving_loss`): means over rows and maps, fp32 (fp64
    for fp64 maps).

    The passes over the map run in its dtype, a bf16 map (a layer's own
    softmax under autocast) as it is, with no fp32 copy: the row maxima
    and diagonal entries are values of the map (exact in fp32), the signs
    of ``P - P^T`` exact (rounding neither flips nor zeroes a difference
    of two bf16 values); the differences themselves round once before
    their fp32 sum (relative error at most 2^-9 in that term).

    Eagerly one autograd function (:class:`DiagonalityTerms`) whose
    backward is written out: the map has four uses in the composition
    (itself, its transpose, its diagonal, its masked copy), each of whose
    gradients autograd writes as a map and adds. A captured graph takes
    the ops themselves (:func:`diagonality_terms_ops`)."""
    if capturing():
        return diagonality_terms_ops(probs)
    return DiagonalityTerms.apply(probs)[0]


def diagonality_terms_ops(probs: torch.Tensor) -> torch.Tensor:
    """:func:`diagonality_terms` as plain ops, for autograd to walk back
    (ops whose gradients autograd gets right at ties)."""
    diag = probs.diagonal(dim1=-2, dim2=-1)
    off_diag = probs.masked_fill(
        torch.eye(probs.shape[-1], dtype=torch.bool, device=probs.device), 0)
    # Row maxima by amax, which shares a gradient among ties (a uniform
    # map's, at the identity initialisation) as the fused kernels do. The
    # row's maximum from the off-diagonal one and the diagonal, not from
    # another pass over the map: where the two tie, the excess is 0 and
    # the maximum gets no gradient, so how maximum() splits it is moot.
    off_max = off_diag.amax(dim=-1).to(
        torch.promote_types(probs.dtype, torch.float32))
    # clamp_min passes no gradient at an excess of exactly 0.
    excess = (off_max - diag).clamp_min(0)
    return _loss(probs, excess, torch.maximum(off_max, diag))


def _loss(probs: torch.Tensor, excess: torch.Tensor,
          row_max: torch.Tensor) -> torch.Tensor:
    """``sum_ij |P_ij - P_ji| / 2`` per row (one norm, where a row sum and
    a mean were two passes and two gradients) plus the rows' dominance
    ``excess / row_max``, averaged over the rows at once."""
    asymmetry = torch.linalg.vector_norm(probs - probs.transpose(-2, -1),
                                         ord=1, dtype=row_max.dtype)
    loss = torch.add((excess / row_max).sum(), asymmetry, alpha=0.5)
    return loss / row_max.numel()


class DiagonalityTerms(torch.autograd.Function):
    """:func:`diagonality_terms` with its gradient written out.

    With ``M`` rows in all, ``S = sign(P - P^T)``, a row's excess ``e`` (its
    off-diagonal maximum ``o`` minus its diagonal entry) and maximum ``m``,
    for an upstream ``g``::

        dL/dP = g S / M
              + g [e > 0] / (M m)  (at the ties of o, shared; -1 at P_ii)
              - g max(e, 0) / (M m^2)  (at the ties of m, shared)

    the ties shared as ``amax``'s gradient shares them, and none through
    the clamp at ``e = 0``, as ``clamp_min``'s. The last two terms live
    only where ``e > 0``, and there ``m = o > P_ii``: the ties of ``m`` are
    those of ``o``, off the diagonal, and one mask serves both. Nor does
    the forward need ``o``: ``max(e, 0) = m - P_ii`` (0 where the diagonal
    is the maximum), so ``m`` is the one row maximum, of the map itself
    (no masked copy of it). ``apply(probs)`` returns the loss, then the
    row maxima (not differentiable), which it saves with the map.
    """

    @staticmethod
    def forward(probs: torch.Tensor):
        row_max = probs.amax(dim=-1).to(
            torch.promote_types(probs.dtype, torch.float32))
        excess = row_max - probs.diagonal(dim1=-2, dim2=-1)
        return _loss(probs, excess, row_max), row_max

    @staticmethod
    def setup_context(ctx, inputs, output):
        probs, = inputs
        _, row_max = output
        ctx.mark_non_differentiable(row_max)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(probs, row_max)

    @staticmethod
    def backward(ctx, grad: torch.Tensor, *_):
        # Row coefficients in fp32; the gradient, a map, in the map's
        # dtype (where the fp32 one was cast to).
        probs, row_max = ctx.saved_tensors
        if grad is None:
            return None
        g = grad / probs[..., 0].numel()
        diag = probs.diagonal(dim1=-2, dim2=-1)
        # e > 0 exactly where the row's maximum is off the diagonal.
        g_excess = (row_max > diag) * (g / row_max)
        # Where the excess e = o - P_ii is positive, m = o and the excess
        # and the maximum together give o the coefficient
        # g / m - g e / m^2 = g P_ii / m^2, shared among its ties; there
        # no tie is on the diagonal and the count is the true one;
        # elsewhere the coefficient is 0 (and the count may include the
        # diagonal).
        ties = probs == row_max[..., None]
        tied = g_excess * diag / (row_max * ties.sum(-1))
        dprobs = (probs - probs.transpose(-2, -1)).sign_().mul_(g)
        dprobs.addcmul_(ties, tied[..., None])
        dprobs.diagonal(dim1=-2, dim2=-1).sub_(g_excess)
        return dprobs


def diagonality_loss_eager(logits: torch.Tensor) -> torch.Tensor:
    """The bounded loss of square ``(B, heads, N, N)`` logits, eagerly
    (in fp32, or fp64 for fp64 logits)."""
    with full_precision(logits):
        return diagonality_terms(at_least_fp32(logits).softmax(dim=-1))


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
                                BLOCK=tk.BLOCK, num_warps=tk.NUM_WARPS)
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
                                 N, 1. / (maps * N), BLOCK=tk.BLOCK,
                                 num_warps=tk.NUM_WARPS)
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


# ------------------------------------------------- maps pooled to the keys


def pool_queries(maps: torch.Tensor, query_hw: Sequence[int],
                 key_hw: Sequence[int]) -> torch.Tensor:
    """``(B, heads, N_q, N_k)`` maps with their queries average-pooled
    (adaptively) from the query grid onto the key grid: ``(B, heads, N_k,
    N_k)`` in fp32 at least (maps of any float dtype), row i the mean of
    the rows of key cell i's queries.

    Eagerly, where the key grid divides the query grid (every PVT stage of
    an input padded to 32, as mmdet pads detection batches), the bins are
    equal blocks: one mean over each block's queries in the maps' own
    layout, accumulated and written in fp32 (:class:`QueryBlockMean`).
    The adaptive pooling, the general route (and the one a captured graph
    takes), needs the maps transposed: a copy each way.
    """
    return pool_queries_in_passing(maps, query_hw, key_hw)[1]


def pool_queries_in_passing(maps: torch.Tensor, query_hw: Sequence[int],
                            key_hw: Sequence[int]):
    """``maps`` for another use, and :func:`pool_queries` of them.

    The maps returned are the maps (as they are or a view). By blocks
    both come from :class:`QueryBlockMean`, whose backward adds the
    pooled map's gradient into the other use's as it reads it, in one
    pass: where the
    map has two uses (an LA layer's softmax, applied to its values and
    pooled for the Diagonality-Preserving loss) autograd would write the
    pooled map's gradient as a map and add the two, a pass and an op
    more.
    """
    B, h, Nq, Nk = maps.shape
    (Hq, Wq), (Hk, Wk) = query_hw, key_hw
    dtype = torch.promote_types(maps.dtype, torch.float32)
    if not capturing() and Hq % Hk == 0 and Wq % Wk == 0:
        blocks = maps.view(B, h, Hk, Hq // Hk, Wk, Wq // Wk, Nk)
        passed, pooled = QueryBlockMean.apply(blocks, dtype)
        return passed.view(B, h, Nq, Nk), pooled.view(B, h, Nk, Nk)
    columns = maps.transpose(-2, -1).to(
        dtype, memory_format=torch.contiguous_format)
    return maps, F.adaptive_avg_pool2d(
        columns.view(B * h, Nk, *query_hw),
        tuple(key_hw)).reshape(B, h, Nk, Nk).transpose(-2, -1)


class QueryBlockMean(torch.autograd.Function):
    """``(B, h, Hk, bh, Wk, bw, N_k)`` blocks of maps as they are, and
    their mean over the queries (dims 3 and 5), accumulated and written
    in ``dtype``.

    The mean's gradient is one pass: the pooled gradient read as a
    broadcast, divided by the block's size and written in the maps'
    dtype (autograd differentiates a mean or sum with a ``dtype`` by
    writing the broadcast in fp32, then casting it, and dividing takes
    one more pass over the pooled map each way: LaViT-S's projected step
    0.3 ms and 8 ops more). Where the maps returned have a gradient too
    (their other use), the pass adds that, in fp32, rounded once.
    """

    @staticmethod
    def forward(blocks: torch.Tensor, dtype: torch.dtype):
        return blocks, blocks.mean((3, 5), dtype=dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        blocks, _ = inputs
        ctx.shape, ctx.dtype = blocks.shape, blocks.dtype
        ctx.set_materialize_grads(False)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_blocks, grad):
        if grad is None:
            return grad_blocks, None
        shape = ctx.shape
        broadcast = grad[:, :, :, None, :, None].expand(shape)
        out = grad.new_empty(shape, dtype=ctx.dtype)
        if grad_blocks is None:
            return torch.div(broadcast, shape[3] * shape[5], out=out), None
        return torch.add(grad_blocks, broadcast,
                         alpha=1 / (shape[3] * shape[5]), out=out), None


def pooled_diagonality_loss_eager(logits: torch.Tensor,
                                  query_hw: Sequence[int],
                                  key_hw: Sequence[int],
                                  probs: Optional[torch.Tensor] = None
                                  ) -> torch.Tensor:
    """The bounded loss of ``(B, heads, N_q, N_k)`` logits whose softmax
    rows are average-pooled from the query grid onto the key grid (an
    ``N_k x N_k`` map per head), eagerly (fp32): the terms of
    :func:`pooled_probabilities`."""
    with full_precision(logits):
        return diagonality_terms(
            pooled_probabilities(logits, query_hw, key_hw, probs))


def pooled_probabilities(logits: torch.Tensor, query_hw: Sequence[int],
                         key_hw: Sequence[int],
                         probs: Optional[torch.Tensor] = None
                         ) -> torch.Tensor:
    """The ``(B, heads, N_k, N_k)`` map the pooled loss measures: the
    softmax of the logits with its queries pooled onto the key grid.
    Given ``probs``, the softmax that the layer wrote (in its dtype, bf16
    under autocast), the pooling reads them instead of an fp32 softmax of
    the logits computed again; given them pooled already (``(B, heads,
    N_k, N_k)``, :func:`pool_queries_in_passing`), they are the map."""
    if probs is not None and probs.shape[-2] != logits.shape[-2]:
        return probs
    with full_precision(logits):
        maps = probs if probs is not None else at_least_fp32(
            logits).softmax(dim=-1)
        return pool_queries(maps, query_hw, key_hw)


def pooled_op_takes(query_hw: Sequence[int], key_hw: Sequence[int]) -> bool:
    """Whether :func:`pooled_diagonality_loss_op` takes these grids: no
    more key cells than queries on either side (each query then lies in at
    most two bins per side), at most ``MAX_POOLED_KEYS`` keys."""
    return (key_hw[0] <= query_hw[0] and key_hw[1] <= query_hw[1]
            and key_hw[0] * key_hw[1] <= MAX_POOLED_KEYS)


def pooled_op_serves(query_hw: Sequence[int],
                     key_hw: Sequence[int]) -> bool:
    """Whether the fused loss of maps on these grids is the pooled op's
    (:func:`pooled_diagonality_loss_op`): grids it takes, and no square
    map small enough for the square maps' op (:data:`MAX_SIDE`)."""
    square = tuple(query_hw) == tuple(key_hw) and \
        key_hw[0] * key_hw[1] <= MAX_SIDE
    return not square and pooled_op_takes(query_hw, key_hw)


def _pooled_map(tk, logits, query_hw, key_hw):
    Nk = key_hw[0] * key_hw[1]
    maps = logits.numel() // (query_hw[0] * query_hw[1] * Nk)
    pooled = torch.empty(maps, Nk, Nk, device=logits.device,
                         dtype=torch.float32)
    block = block_d(Nk)  # a softmax row is one tile
    tk.pooled_map_kernel[(maps, Nk)](logits, pooled, *query_hw, *key_hw,
                                     BLOCK_K=block)
    return pooled, maps, Nk, block


def pooled_loss_kernels(logits: torch.Tensor, query_hw: Sequence[int],
                        key_hw: Sequence[int],
                        grad: Optional[torch.Tensor] = None,
                        with_loss: bool = False):
    """By the kernels, from the contiguous logits: the pooled map, then
    with ``with_loss`` the loss, and given the loss's gradient ``grad``
    (one element) the pooled map's gradient ``dM`` ``(maps, N_k, N_k)``
    fp32: ``(loss or None, dM or None)``."""
    tk = _kernels()
    pooled, maps, Nk, block = _pooled_map(tk, logits, query_hw, key_hw)
    loss = dpooled = None
    if with_loss:
        partial = torch.empty(maps, Nk, 2, device=logits.device,
                              dtype=torch.float32)
        tk.pooled_terms_kernel[(maps, Nk)](pooled, partial, pooled, partial,
                                           Nk, 0., WRITE_GRAD=False,
                                           BLOCK_K=block)
        loss = partial.sum() / (maps * Nk)
    if grad is not None:
        dpooled = torch.empty_like(pooled)
        tk.pooled_terms_kernel[(maps, Nk)](pooled, pooled, dpooled,
                                           grad.reshape(1), Nk,
                                           1. / (maps * Nk),
                                           WRITE_GRAD=True, BLOCK_K=block)
    return loss, dpooled


@torch.library.custom_op('vitattn::pooled_diagonality_loss',
                         mutates_args=())
def pooled_diagonality_loss_op(logits: torch.Tensor, query_hw: List[int],
                               key_hw: List[int]) -> torch.Tensor:
    """:func:`pooled_diagonality_loss_eager` as one op (grids that
    :func:`pooled_op_takes`)."""
    if not kernels_run_on(logits.device):
        return pooled_diagonality_loss_eager(logits, query_hw, key_hw)
    return pooled_loss_kernels(logits.contiguous(), query_hw, key_hw,
                               with_loss=True)[0]


@pooled_diagonality_loss_op.register_fake
def _(logits, query_hw, key_hw):
    return logits.new_empty((), dtype=torch.float32)


@torch.library.custom_op('vitattn::pooled_diagonality_loss_backward',
                         mutates_args=())
def pooled_diagonality_loss_backward_op(grad: torch.Tensor,
                                        logits: torch.Tensor,
                                        query_hw: List[int],
                                        key_hw: List[int]) -> torch.Tensor:
    """The gradient of the logits (the pooled map recomputed)."""
    if not kernels_run_on(logits.device):
        return eager_grads(pooled_diagonality_loss_eager, grad, (logits, ),
                           (query_hw, key_hw))[0]
    logits = logits.contiguous()
    _, dpooled = pooled_loss_kernels(logits, query_hw, key_hw, grad)
    dlogits = torch.empty_like(logits)
    _kernels().pooled_backward_kernel[(dpooled.shape[0],
                                       query_hw[0] * query_hw[1])](
        logits, dpooled, dlogits, *query_hw, *key_hw,
        BLOCK_K=block_d(key_hw[0] * key_hw[1]))
    return dlogits


@pooled_diagonality_loss_backward_op.register_fake
def _(grad, logits, query_hw, key_hw):
    return torch.empty_like(logits)


def _pooled_backward(ctx, grad):
    logits, query_hw, key_hw = saved_inputs(ctx)
    return (pooled_diagonality_loss_backward_op(grad, logits, query_hw,
                                                key_hw), None, None)


pooled_diagonality_loss_op.register_autograd(_pooled_backward,
                                             setup_context=save_inputs)


@register_flop_formula(torch.ops.vitattn.pooled_diagonality_loss)
def _pooled_flops(logits, *args, out_shape=None, **kwargs) -> int:
    """No products: memory-bound passes."""
    return 0


@register_flop_formula(torch.ops.vitattn.pooled_diagonality_loss_backward)
def _pooled_backward_flops(grad, logits, *args, out_shape=None,
                           **kwargs) -> int:
    return 0
