"""Triton kernels of ``softmax(logits + mask) v`` on given logits (the custom
op of :mod:`vitattn_mm.ops.softmax_apply`): flash attention's passes with
the logits read instead of computed.

Per image (or window) ``b`` and head ``h``: ``out_i = sum_j p_ij v_j``,
``p_ij = exp(L_ij + mask_(b % nW),ij - lse_i)``. Forward: online softmax
over key blocks, the probabilities never stored; the rows' log-sum-exp
``lse`` written beside the output. Backward, from the forward's ``lse``
and output (flash attention's): one kernel per query block writes ``dL =
p (dout v^T - delta)`` in one sweep over the keys (``delta_i = sum_j p_ij
(dout_i . v_j) = dout_i . out_i``, from the two ``d``-wide rows), one per
key block accumulates ``dv = p^T dout``: each reads the logits once,
which are the largest tensor by far (``N_k`` against ``d`` a row).

The logits are ``(B, heads, N_q, N_k)`` and contiguous; ``v`` and the
output are ``(B, heads, N, d)`` with any strides but a unit last one.
``UPCAST`` as in :mod:`.triton_mean_shift_attention`.

With ``DP`` the pass also serves the bounded Diagonality-Preserving loss of
the same softmax, its queries pooled onto the key grid
(:mod:`.triton_diagonality_loss`), whose gradient by the logits is a
softmax backward of its own, ``p (D - E)``: ``D_ij`` the pooled map's
gradient ``dM`` read at query ``i``'s bins (:func:`pooled_gradient_tile`),
``E_i = sum_j p_ij D_ij``. The forward sums ``E`` for ``dM`` of a unit
loss gradient in its sweep (``dM`` is linear in it) and writes it beside
``lse``; the backward adds ``D`` to ``dp`` and ``g E`` to ``delta``
(``g``: the loss's gradient): the loss's backward is no pass of its own,
nor an addition of two logits gradients.
"""
import triton
import triton.language as tl

from .triton_diagonality_loss import pooled_gradient_tile
from .triton_tiles import head_tile, online_softmax_weights, program_rows

BLOCK = 64
#: Warps per program: with 8 no bf16 kernel spills a register, where
#: Triton's default 4 spilled up to 144 B a thread (``tools/
#: compile_kernels.py``, sm_90). The GPU suite's tuning section tries
#: others.
NUM_WARPS = 8
#: Keys per block of the kernels that also serve the DP loss: the pooled
#: map's gradient is one more tile, gathered by rows (64 spilled about
#: 300 B a thread in bf16).
DP_BLOCK_N = 32


@triton.jit
def _logit_tile(l_ptr, mask_ptr, bh, b, offs_m, offs_n, mask_m, mask_n, Nq, Nk,
                NW, HAS_MASK: tl.constexpr):
    """fp32 logits (mask added), -inf past the last key."""
    both = mask_m[:, None] & mask_n[None, :]
    pairs = offs_m[:, None] * Nk + offs_n[None, :]
    s = tl.load(l_ptr + bh.to(tl.int64) * Nq * Nk + pairs, mask=both,
                other=0.).to(tl.float32)
    if HAS_MASK:
        s += tl.load(mask_ptr + (b % NW) * Nq * Nk + pairs,
                     mask=both,
                     other=0.).to(tl.float32)
    return tl.where(mask_n[None, :], s, float('-inf'))


@triton.jit
def forward_kernel(l_ptr, mask_ptr, v_ptr, svb, svh, svn, out_ptr, lse_ptr,
                   dmap_ptr, e_ptr, NH, Nq, Nk, NW, D, Hq, Wq, Hk, Wk,
                   HAS_MASK: tl.constexpr, DP: tl.constexpr,
                   UPCAST: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """A query block's output and log-sum-exp (which the backward
    reads); with ``DP`` also its rows' ``E`` for the pooled map's gradient
    at ``dmap_ptr`` (the query and key grids ``Hq x Wq``, ``Hk x Wk``)."""
    bh, b, h, offs_m, mask_m, offs_d, mask_d = program_rows(
        Nq, NH, D, BLOCK_M, BLOCK_D)
    m_i = tl.full([BLOCK_M], float('-inf'), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    e_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for start in range(0, Nk, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        mask_n = offs_n < Nk
        s = _logit_tile(l_ptr, mask_ptr, bh, b, offs_m, offs_n, mask_m, mask_n,
                        Nq, Nk, NW, HAS_MASK)
        v = head_tile(v_ptr + h * svh, svb, svn, b, offs_n, mask_n, 0,
                      offs_d, mask_d, UPCAST)
        m_i, l_i, acc, p, alpha = online_softmax_weights(m_i, l_i, acc, s,
                                                         v)
        if DP:  # E's sum, rescaled with the running maximum as l_i is
            e_i = e_i * alpha + tl.sum(p * pooled_gradient_tile(
                dmap_ptr, bh.to(tl.int64), offs_m, mask_m, offs_n, mask_n,
                Hq, Wq, Hk, Wk), 1)
    tl.store(out_ptr + bh.to(tl.int64) * Nq * D + offs_m[:, None] * D +
             offs_d[None, :],
             (acc / l_i[:, None]).to(out_ptr.dtype.element_ty),
             mask=mask_m[:, None] & mask_d[None, :])
    tl.store(lse_ptr + bh * Nq + offs_m, m_i + tl.log(l_i), mask=mask_m)
    if DP:
        tl.store(e_ptr + bh * Nq + offs_m, e_i / l_i, mask=mask_m)


@triton.jit
def _probs(l_ptr, mask_ptr, v_ptr, svb, svh, svn, g, lse, bh, b, h, start,
           offs_m, mask_m, offs_d, mask_d, Nq, Nk, NW, HAS_MASK: tl.constexpr,
           UPCAST: tl.constexpr, BLOCK_N: tl.constexpr):
    """For the key block at ``start``: its indices, the probabilities and
    ``dp = dout v^T``."""
    offs_n = start + tl.arange(0, BLOCK_N)
    mask_n = offs_n < Nk
    s = _logit_tile(l_ptr, mask_ptr, bh, b, offs_m, offs_n, mask_m, mask_n, Nq,
                    Nk, NW, HAS_MASK)
    p = tl.where(mask_m[:, None], tl.exp(s - lse[:, None]), 0.)
    v = head_tile(v_ptr + h * svh, svb, svn, b, offs_n, mask_n, 0, offs_d,
                  mask_d, UPCAST)
    dp = tl.dot(g, tl.trans(v), input_precision='ieee').to(tl.float32)
    return offs_n, mask_n, p, dp


@triton.jit
def logits_backward_kernel(l_ptr, mask_ptr, v_ptr, svb, svh, svn, g_ptr,
                           out_ptr, lse_ptr, dl_ptr, dmap_ptr, e_ptr,
                           dloss_ptr, other_ptr, NH, Nq, Nk, NW, D, Hq, Wq,
                           Hk, Wk, HAS_MASK: tl.constexpr, DP: tl.constexpr,
                           OTHER: tl.constexpr, UPCAST: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                           BLOCK_D: tl.constexpr):
    """A query block's ``dL`` over every key block; with ``DP`` the DP
    loss's share too, from its pooled map's gradient at ``dmap_ptr`` (for
    the loss gradient at ``dloss_ptr``) and the forward's ``E``; with
    ``OTHER`` the gradient of the logits' other use (at ``other_ptr``,
    contiguous) added before the one rounding."""
    bh, b, h, offs_m, mask_m, offs_d, mask_d = program_rows(
        Nq, NH, D, BLOCK_M, BLOCK_D)
    rows = bh.to(tl.int64) * Nq * D + offs_m[:, None] * D + offs_d[None, :]
    both = mask_m[:, None] & mask_d[None, :]
    g = tl.load(g_ptr + rows, mask=both, other=0.)
    # delta_i = dout_i . out_i in fp32, from the output as it was stored.
    delta = tl.sum(g.to(tl.float32) *
                   tl.load(out_ptr + rows, mask=both,
                           other=0.).to(tl.float32), 1)
    if UPCAST:
        g = g.to(tl.float32)
    lse = tl.load(lse_ptr + bh * Nq + offs_m, mask=mask_m, other=0.)
    if DP:
        delta += tl.load(dloss_ptr).to(tl.float32) * tl.load(
            e_ptr + bh * Nq + offs_m, mask=mask_m, other=0.)
    for start in range(0, Nk, BLOCK_N):
        offs_n, mask_n, p, dp = _probs(l_ptr, mask_ptr, v_ptr, svb, svh, svn,
                                       g, lse, bh, b, h, start, offs_m, mask_m,
                                       offs_d, mask_d, Nq, Nk, NW, HAS_MASK,
                                       UPCAST, BLOCK_N)
        if DP:
            dp += pooled_gradient_tile(dmap_ptr, bh.to(tl.int64), offs_m,
                                       mask_m, offs_n, mask_n, Hq, Wq, Hk,
                                       Wk)
        at = bh.to(tl.int64) * Nq * Nk + offs_m[:, None] * Nk + \
            offs_n[None, :]
        pairs = mask_m[:, None] & mask_n[None, :]
        dl = p * (dp - delta[:, None])
        if OTHER:
            dl += tl.load(other_ptr + at, mask=pairs, other=0.).to(
                tl.float32)
        tl.store(dl_ptr + at, dl.to(dl_ptr.dtype.element_ty), mask=pairs)


@triton.jit
def values_backward_kernel(l_ptr, mask_ptr, g_ptr, lse_ptr, dv_ptr, sdb, sdh,
                           sdn, NH, Nq, Nk, NW, D, HAS_MASK: tl.constexpr,
                           UPCAST: tl.constexpr, BLOCK_M: tl.constexpr,
                           BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """A key block's ``dv`` over every query block."""
    bh, b, h, offs_n, mask_n, offs_d, mask_d = program_rows(
        Nk, NH, D, BLOCK_N, BLOCK_D)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    for start in range(0, Nq, BLOCK_M):
        offs_m = start + tl.arange(0, BLOCK_M)
        mask_m = offs_m < Nq
        s = _logit_tile(l_ptr, mask_ptr, bh, b, offs_m, offs_n, mask_m, mask_n,
                        Nq, Nk, NW, HAS_MASK)
        lse = tl.load(lse_ptr + bh * Nq + offs_m, mask=mask_m, other=0.)
        p = tl.where(mask_m[:, None], tl.exp(s - lse[:, None]), 0.)
        g = tl.load(g_ptr + bh.to(tl.int64) * Nq * D + offs_m[:, None] * D +
                    offs_d[None, :],
                    mask=mask_m[:, None] & mask_d[None, :],
                    other=0.)
        if UPCAST:
            g = g.to(tl.float32)
        dv += tl.dot(tl.trans(p).to(g.dtype), g, input_precision='ieee')
    tl.store(dv_ptr + b * sdb + h * sdh + offs_n[:, None] * sdn +
             offs_d[None, :],
             dv.to(dv_ptr.dtype.element_ty),
             mask=mask_n[:, None] & mask_d[None, :])
