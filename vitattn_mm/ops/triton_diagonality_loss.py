"""Triton kernels of the bounded Diagonality-Preserving loss of square score
maps (the custom op of :mod:`vitattn_mm.ops.diagonality_loss`): one
program per map (an image's window and head), the whole ``N x N`` map one
tile (``N <= BLOCK``).

Per map, with ``P = softmax(logits)`` by rows (fp32)::

    asymmetry = sum_ij |P_ij - P_ji| / 2
    dominance = sum_i relu(max_{j != i} P_ij - P_ii) / max_j P_ij

written per map (the op sums them and divides by rows x maps). The
backward recomputes ``P`` and gives ``dP``: ``sign(P_ij - P_ji)`` for the
asymmetry; for the dominance the row maxima's gradients, split evenly
between ties as ``amax``'s are, and the diagonal's; then softmax's
backward.
"""
import triton
import triton.language as tl

#: The largest map side a program takes (7x7 and 8x8 windows: 49, 64).
BLOCK = 64


@triton.jit
def _probabilities(l_ptr, m, N, BLOCK: tl.constexpr):
    """A map's rows' softmax (fp32, zero outside the map) and its masks."""
    rows = tl.arange(0, BLOCK)
    cols = tl.arange(0, BLOCK)
    valid = (rows[:, None] < N) & (cols[None, :] < N)
    logits = tl.load(l_ptr + m.to(tl.int64) * N * N + rows[:, None] * N +
                     cols[None, :], mask=valid,
                     other=float('-inf')).to(tl.float32)
    top = tl.max(logits, 1)
    e = tl.where(valid, tl.exp(logits - tl.where(rows < N, top, 0.)[:, None]),
                 0.)
    total = tl.sum(e, 1)
    P = e / tl.where(rows < N, total, 1.)[:, None]
    diagonal = rows[:, None] == cols[None, :]
    return P, valid, rows, diagonal


@triton.jit
def _row_terms(P, valid, rows, diagonal, N):
    """Per row: the diagonal entry, the largest off-diagonal one (the
    diagonal counted as 0, as a masked fill leaves it), the largest one,
    and the clamped excess."""
    diag = tl.sum(tl.where(diagonal & valid, P, 0.), 1)
    off = tl.where(diagonal, 0., P)
    off_max = tl.max(tl.where(valid, off, float('-inf')), 1)
    row_max = tl.max(tl.where(valid, P, float('-inf')), 1)
    row_max = tl.where(rows < N, row_max, 1.)
    off_max = tl.where(rows < N, off_max, 0.)
    excess = tl.maximum(off_max - diag, 0.)
    return diag, off, off_max, row_max, excess


@triton.jit
def forward_kernel(l_ptr, out_ptr, N, BLOCK: tl.constexpr):
    """Map ``m``'s asymmetry and dominance sums, at ``out[m, 0:2]``."""
    m = tl.program_id(0)
    P, valid, rows, diagonal = _probabilities(l_ptr, m, N, BLOCK)
    asymmetry = tl.sum(tl.sum(tl.where(valid, tl.abs(P - tl.trans(P)), 0.),
                              1), 0) / 2
    diag, off, off_max, row_max, excess = _row_terms(P, valid, rows,
                                                     diagonal, N)
    dominance = tl.sum(tl.where(rows < N, excess / row_max, 0.), 0)
    tl.store(out_ptr + m * 2, asymmetry)
    tl.store(out_ptr + m * 2 + 1, dominance)


@triton.jit
def backward_kernel(l_ptr, grad_ptr, dl_ptr, N, scale,
                    BLOCK: tl.constexpr):
    """Map ``m``'s gradient: ``scale`` is the loss's gradient over rows x
    maps."""
    m = tl.program_id(0)
    P, valid, rows, diagonal = _probabilities(l_ptr, m, N, BLOCK)
    coef = tl.load(grad_ptr).to(tl.float32) * scale
    diff = P - tl.trans(P)
    dP = tl.where(diff > 0, 1., tl.where(diff < 0, -1., 0.))
    diag, off, off_max, row_max, excess = _row_terms(P, valid, rows,
                                                     diagonal, N)
    passes = (off_max - diag) > 0  # clamp_min passes no gradient at 0
    d_off = tl.where(passes, 1. / row_max, 0.)
    d_row = -excess / (row_max * row_max)
    at_off = valid & (off == off_max[:, None])
    at_row = valid & (P == row_max[:, None])
    count_off = tl.sum(tl.where(at_off, 1., 0.), 1)
    count_row = tl.sum(tl.where(at_row, 1., 0.), 1)
    dP += tl.where(at_off & ~diagonal,
                   (d_off / tl.maximum(count_off, 1.))[:, None], 0.)
    dP += tl.where(at_row, (d_row / tl.maximum(count_row, 1.))[:, None], 0.)
    dP += tl.where(diagonal, -d_off[:, None], 0.)
    dP = tl.where(valid, dP * coef, 0.)
    dlogits = P * (dP - tl.sum(dP * P, 1)[:, None])
    cols = tl.arange(0, BLOCK)
    tl.store(dl_ptr + m.to(tl.int64) * N * N + rows[:, None] * N +
             cols[None, :], dlogits.to(dl_ptr.dtype.element_ty), mask=valid)
