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
#: Warps per program of a square map (one map a program): with 8 its
#: backward keeps its tiles in registers, where 4 spilled 264 B a thread
#: (``tools/compile_kernels.py``, sm_90).
NUM_WARPS = 8


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
def _terms(P, PT, valid, rows, diagonal, N):
    """The asymmetry and dominance sums of the rows of tile ``P``, whose
    transpose's rows (the map's columns) are ``PT``."""
    asymmetry = tl.sum(tl.sum(tl.where(valid, tl.abs(P - PT), 0.), 1), 0) / 2
    _, _, _, row_max, excess = _row_terms(P, valid, rows, diagonal, N)
    return asymmetry, tl.sum(tl.where(rows < N, excess / row_max, 0.), 0)


@triton.jit
def _terms_gradient(P, PT, valid, rows, diagonal, N):
    """The gradient of :func:`_terms`' sum by ``P`` (the asymmetry's,
    ``sign(P - PT)``, counting ``P_ij`` in row j too; the row maxima's split
    evenly between ties as ``amax``'s; none through a clamped excess)."""
    diff = P - PT
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
    return tl.where(valid, dP, 0.)


@triton.jit
def forward_kernel(l_ptr, out_ptr, N, BLOCK: tl.constexpr):
    """Map ``m``'s asymmetry and dominance sums, at ``out[m, 0:2]``."""
    m = tl.program_id(0)
    P, valid, rows, diagonal = _probabilities(l_ptr, m, N, BLOCK)
    asymmetry, dominance = _terms(P, tl.trans(P), valid, rows, diagonal, N)
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
    dP = _terms_gradient(P, tl.trans(P), valid, rows, diagonal, N) * coef
    dlogits = P * (dP - tl.sum(dP * P, 1)[:, None])
    cols = tl.arange(0, BLOCK)
    tl.store(dl_ptr + m.to(tl.int64) * N * N + rows[:, None] * N +
             cols[None, :], dlogits.to(dl_ptr.dtype.element_ty), mask=valid)


# ------------------------------------------------- maps pooled to the keys
# LaViT's maps are not square (stage 1: 64,000 queries x 1,000 keys): the
# queries of each key cell's adaptive-pooling bin are averaged first, giving
# an ``N_k x N_k`` map ``M`` whose terms are those above. Three kernels:
# the pooled map (a pass over the logits), its terms and their gradient by
# rows (on the small map), and the logits' gradient (a pass over them).


@triton.jit
def _bin(o, size_in, size_out):
    """Adaptive pooling's input range ``[start, end)`` of output ``o >= 0``
    (floor and ceiling written for non-negative operands: Triton's integer
    division truncates)."""
    return ((o * size_in) // size_out,
            ((o + 1) * size_in + size_out - 1) // size_out)


@triton.jit
def _row_softmax(l_ptr, row, Nk, cols, valid):
    logits = tl.load(l_ptr + row * Nk + cols, mask=valid,
                     other=float('-inf')).to(tl.float32)
    e = tl.where(valid, tl.exp(logits - tl.max(logits, 0)), 0.)
    return e / tl.sum(e, 0)


@triton.jit
def pooled_map_kernel(l_ptr, map_ptr, Hq, Wq, Hk, Wk,
                      BLOCK_K: tl.constexpr):
    """Row ``i`` of map ``m``'s pooled probabilities: the mean of the
    softmax rows of the queries in key cell ``i``'s bin."""
    m, i = tl.program_id(0).to(tl.int64), tl.program_id(1)
    Nk = Hk * Wk
    cols = tl.arange(0, BLOCK_K)
    valid = cols < Nk
    y0, y1 = _bin(i // Wk, Hq, Hk)
    x0, x1 = _bin(i % Wk, Wq, Wk)
    acc = tl.zeros([BLOCK_K], tl.float32)
    base = l_ptr + m * Hq * Wq * Nk
    for y in range(y0, y1):
        for x in range(x0, x1):
            acc += _row_softmax(base, y * Wq + x, Nk, cols, valid)
    acc = acc / ((y1 - y0) * (x1 - x0))
    tl.store(map_ptr + (m * Nk + i) * Nk + cols, acc, mask=valid)


@triton.jit
def pooled_terms_kernel(map_ptr, out_ptr, dmap_ptr, grad_ptr, Nk, scale,
                        WRITE_GRAD: tl.constexpr, BLOCK_K: tl.constexpr):
    """Row ``i`` of pooled map ``m`` (a ``[1, BLOCK_K]`` tile, so the
    square maps' :func:`_terms` serve it): its asymmetry and dominance at
    ``out[m, i, 0:2]``; with ``WRITE_GRAD`` instead the row of ``dM`` (the
    loss's gradient ``grad * scale``)."""
    m = tl.program_id(0).to(tl.int64)
    rows = tl.program_id(1) + tl.zeros([1], tl.int32)
    cols = tl.arange(0, BLOCK_K)
    valid = (rows[:, None] < Nk) & (cols[None, :] < Nk)
    diagonal = rows[:, None] == cols[None, :]
    at_row = (m * Nk + rows[:, None]) * Nk + cols[None, :]
    P = tl.load(map_ptr + at_row, mask=valid, other=0.)
    PT = tl.load(map_ptr + (m * Nk + cols[None, :]) * Nk + rows[:, None],
                 mask=valid, other=0.)
    out = (m * Nk + tl.program_id(1)) * 2
    if WRITE_GRAD:
        coef = tl.load(grad_ptr).to(tl.float32) * scale
        dP = _terms_gradient(P, PT, valid, rows, diagonal, Nk) * coef
        tl.store(dmap_ptr + at_row, dP, mask=valid)
    else:
        asymmetry, dominance = _terms(P, PT, valid, rows, diagonal, Nk)
        tl.store(out_ptr + out, asymmetry)
        tl.store(out_ptr + out + 1, dominance)


@triton.jit
def _bins_holding(y, size_in, size_out):
    """The adaptive-pooling bins (of ``size_out`` over ``size_in``) that
    hold index ``y``: its own, ``(y * size_out) // size_in``, and where
    bins overlap the neighbour that holds it too (with ``size_out <=
    size_in`` a neighbour, never both: each index lies in at most two
    bins). Returns ``(own, other, other holds y)``."""
    own = (y * size_out) // size_in
    before = (own >= 1) & (((own * size_in) + size_out - 1) // size_out > y)
    after = (own + 1 < size_out) & (((own + 1) * size_in) // size_out <= y)
    return own, tl.where(before, own - 1, own + 1), before | after


@triton.jit
def pooled_gradient_tile(dmap_ptr, m, q, q_ok, cols, col_ok, Hq, Wq, Hk,
                         Wk):
    """The gradient of the softmax rows of queries ``q`` (a vector) at
    keys ``cols`` that the pooled map's gradient ``dM`` (map ``m``'s
    rows at ``dmap_ptr``) gives: the ``dM`` rows of the bins holding each
    query, each over its bin's size (fp32, ``[len(q), len(cols)]``)."""
    Nk = Hk * Wk
    y_own, y_other, y_two = _bins_holding(q // Wq, Hq, Hk)
    x_own, x_other, x_two = _bins_holding(q % Wq, Wq, Wk)
    g = tl.zeros([q.shape[0], cols.shape[0]], tl.float32)
    for second_y in tl.static_range(2):
        oy = y_other if second_y else y_own
        y0, y1 = _bin(oy, Hq, Hk)
        for second_x in tl.static_range(2):
            ox = x_other if second_x else x_own
            x0, x1 = _bin(ox, Wq, Wk)
            inside = q_ok
            if second_y:
                inside = inside & y_two
            if second_x:
                inside = inside & x_two
            cell = tl.where(inside, oy * Wk + ox, 0)
            d = tl.load(dmap_ptr + (m * Nk + cell[:, None]) * Nk +
                        cols[None, :], mask=inside[:, None] & col_ok[None, :],
                        other=0.)
            g += d / tl.where(inside, (y1 - y0) * (x1 - x0), 1)[:, None]
    return g


@triton.jit
def pooled_backward_kernel(l_ptr, dmap_ptr, dl_ptr, Hq, Wq, Hk, Wk,
                           BLOCK_K: tl.constexpr):
    """Query ``q``'s logits gradient: the ``dM`` rows of the bins holding
    it, each over its bin's size, through its softmax."""
    m, q = tl.program_id(0).to(tl.int64), tl.program_id(1)
    Nk = Hk * Wk
    cols = tl.arange(0, BLOCK_K)
    valid = cols < Nk
    rows = q + tl.zeros([1], tl.int32)  # the one query, as a vector
    g = tl.sum(pooled_gradient_tile(dmap_ptr, m, rows, rows >= 0, cols,
                                    valid, Hq, Wq, Hk, Wk), 0)
    base = m * Hq * Wq * Nk
    P = _row_softmax(l_ptr + base, q, Nk, cols, valid)
    dlogits = P * (g - tl.sum(g * P, 0))
    tl.store(dl_ptr + base + q * Nk + cols,
             dlogits.to(dl_ptr.dtype.element_ty), mask=valid)
