"""Triton kernels of Less-Attention's score-map convolutions (the custom op
of :mod:`vitattn_mm.ops.score_conv`).

Per image ``b`` and head ``h`` the logits ``A`` are ``(N_q, N_k)``: a map
over the query grid ``(Hq, Wq)`` times the key grid ``(Hk, Wk)``. The op
runs a depthwise ``K x K`` conv over the key grid, then one over the query
grid (zero padding ``K // 2``, one kernel per head)::

    Y_ij = sum_a wq_a sum_c wk_c A_(i+a)(j+c)

where ``i + a`` is query ``i``'s neighbour at tap ``a`` on its grid (zero
outside), and ``j + c`` key ``j``'s. One program a tile of queries x keys
of one (image, head). Backward: the same sums with the taps mirrored give
``dA``; the weight gradients are the tile's sums of ``dY`` times the
key-convolved map (``wq``) and of the query-transposed ``dY`` times ``A``
(``wk``), added with fp32 atomics.
"""
import triton
import triton.language as tl

BLOCK_Q = 16
BLOCK_K = 64


@triton.jit
def _neighbour(offs, mask, width, height, dy, dx):
    """Token indices of ``offs``'s neighbours at ``(dy, dx)`` on a grid of
    ``height x width``, and whether they exist."""
    y, x = offs // width + dy, offs % width + dx
    ok = mask & (y >= 0) & (y < height) & (x >= 0) & (x < width)
    return y * width + x, ok


@triton.jit
def _tile(ptr, rows, row_ok, cols, col_ok, Nk):
    return tl.load(ptr + rows[:, None] * Nk + cols[None, :],
                   mask=row_ok[:, None] & col_ok[None, :],
                   other=0.).to(tl.float32)


@triton.jit
def forward_kernel(a_ptr, y_ptr, wk_ptr, wq_ptr, NH, Nq, Nk, Hq, Wq, Hk, Wk,
                   K: tl.constexpr, BLOCK_Q: tl.constexpr,
                   BLOCK_K: tl.constexpr):
    bh = tl.program_id(0)
    h = bh % NH
    offs_q = tl.program_id(1) * BLOCK_Q + tl.arange(0, BLOCK_Q)
    offs_k = tl.program_id(2) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask_q, mask_k = offs_q < Nq, offs_k < Nk
    base = bh.to(tl.int64) * Nq * Nk
    acc = tl.zeros([BLOCK_Q, BLOCK_K], tl.float32)
    for a in tl.static_range(K * K):
        rows, row_ok = _neighbour(offs_q, mask_q, Wq, Hq, a // K - K // 2,
                                  a % K - K // 2)
        x = tl.zeros([BLOCK_Q, BLOCK_K], tl.float32)
        for c in tl.static_range(K * K):
            cols, col_ok = _neighbour(offs_k, mask_k, Wk, Hk,
                                      c // K - K // 2, c % K - K // 2)
            x += tl.load(wk_ptr + h * K * K + c).to(tl.float32) * _tile(
                a_ptr + base, rows, row_ok, cols, col_ok, Nk)
        acc += tl.load(wq_ptr + h * K * K + a).to(tl.float32) * x
    tl.store(y_ptr + base + offs_q[:, None] * Nk + offs_k[None, :],
             acc.to(y_ptr.dtype.element_ty),
             mask=mask_q[:, None] & mask_k[None, :])


@triton.jit
def backward_kernel(a_ptr, g_ptr, da_ptr, wk_ptr, wq_ptr, dwk_ptr, dwq_ptr,
                    NH, Nq, Nk, Hq, Wq, Hk, Wk, K: tl.constexpr,
                    BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr):
    """``dA`` of a tile, and the tile's share of both weight gradients."""
    bh = tl.program_id(0)
    h = bh % NH
    offs_q = tl.program_id(1) * BLOCK_Q + tl.arange(0, BLOCK_Q)
    offs_k = tl.program_id(2) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask_q, mask_k = offs_q < Nq, offs_k < Nk
    both = mask_q[:, None] & mask_k[None, :]
    base = bh.to(tl.int64) * Nq * Nk
    g = _tile(g_ptr + base, offs_q, mask_q, offs_k, mask_k, Nk)
    da = tl.zeros([BLOCK_Q, BLOCK_K], tl.float32)
    dx = tl.zeros([BLOCK_Q, BLOCK_K], tl.float32)  # query-transposed dY
    for a in tl.static_range(K * K):
        dy, dx_ = a // K - K // 2, a % K - K // 2
        wq = tl.load(wq_ptr + h * K * K + a).to(tl.float32)
        # dY's taps mirrored: query i receives from i - a.
        rows_in, in_ok = _neighbour(offs_q, mask_q, Wq, Hq, -dy, -dx_)
        # The map's taps as in the forward: for wq's gradient.
        rows, row_ok = _neighbour(offs_q, mask_q, Wq, Hq, dy, dx_)
        x = tl.zeros([BLOCK_Q, BLOCK_K], tl.float32)
        dxa = tl.zeros([BLOCK_Q, BLOCK_K], tl.float32)
        for c in tl.static_range(K * K):
            wk = tl.load(wk_ptr + h * K * K + c).to(tl.float32)
            cy, cx = c // K - K // 2, c % K - K // 2
            cols_in, cin_ok = _neighbour(offs_k, mask_k, Wk, Hk, -cy, -cx)
            dxa += wk * _tile(g_ptr + base, rows_in, in_ok, cols_in, cin_ok,
                              Nk)
            cols, col_ok = _neighbour(offs_k, mask_k, Wk, Hk, cy, cx)
            x += wk * _tile(a_ptr + base, rows, row_ok, cols, col_ok, Nk)
        da += wq * dxa
        tl.atomic_add(dwq_ptr + h * K * K + a, tl.sum(tl.sum(g * x, 1), 0))
        dx += wq * _tile(g_ptr + base, rows_in, in_ok, offs_k, mask_k, Nk)
    for c in tl.static_range(K * K):
        cols, col_ok = _neighbour(offs_k, mask_k, Wk, Hk, c // K - K // 2,
                                  c % K - K // 2)
        tile = _tile(a_ptr + base, offs_q, mask_q, cols, col_ok, Nk)
        tl.atomic_add(dwk_ptr + h * K * K + c,
                      tl.sum(tl.sum(tl.where(both, dx, 0.) * tile, 1), 0))
    tl.store(da_ptr + base + offs_q[:, None] * Nk + offs_k[None, :],
             da.to(da_ptr.dtype.element_ty), mask=both)
