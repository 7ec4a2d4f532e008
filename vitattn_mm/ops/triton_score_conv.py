"""Triton kernels of Less-Attention's score-map convolutions (the custom op
of :mod:`vitattn_mm.ops.score_conv`).

Per image ``b`` and head ``h`` the logits ``A`` are ``(N_q, N_k)``: a map
over the query grid ``(Hq, Wq)`` times the key grid ``(Hk, Wk)``. The op
runs a depthwise ``K x K`` conv over the key grid, then one over the query
grid (zero padding ``K // 2``, one kernel per head)::

    X_ij = sum_c wk_c A_i(j+c)        Y_ij = sum_a wq_a X_(i+a)j

where ``j + c`` is key ``j``'s neighbour at tap ``c`` on its grid (zero
outside), and ``i + a`` query ``i``'s. The two convolutions are separable,
and each is one pass (:func:`conv_pass_kernel`, ``K * K`` taps): done in
one pass, every output would read ``K**4`` neighbours (81 for LaViT's 3x3,
against 18), which made the first kernel slower than the eager convs on a
GPU. Backward, with the taps mirrored (``T``)::

    dX = wq^T * dY    dA = wk^T * dX
    dwq_a = sum dY_ij X_(i+a)j        dwk_c = sum dX_ij A_i(j+c)

``X`` is recomputed (one pass) rather than kept; each weight gradient is
summed by the transposed pass that reads its ``dY`` / ``dX`` tile, one
fp32 atomic per tap and program.
"""
import triton
import triton.language as tl

BLOCK_Q = 16
BLOCK_K = 64
#: Warps per program (Triton's default; the GPU suite's tuning section
#: tries others).
NUM_WARPS = 4


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
def _shifted(ptr, offs_q, mask_q, offs_k, mask_k, Nk, Hq, Wq, Hk, Wk, dy,
             dx, OVER_KEYS: tl.constexpr):
    """The ``[BLOCK_Q, BLOCK_K]`` tile of a map shifted by ``(dy, dx)`` on
    the key grid (``OVER_KEYS``) or on the query grid, zero outside."""
    if OVER_KEYS:
        cols, col_ok = _neighbour(offs_k, mask_k, Wk, Hk, dy, dx)
        return _tile(ptr, offs_q, mask_q, cols, col_ok, Nk)
    rows, row_ok = _neighbour(offs_q, mask_q, Wq, Hq, dy, dx)
    return _tile(ptr, rows, row_ok, offs_k, mask_k, Nk)


@triton.jit
def conv_pass_kernel(src_ptr, dst_ptr, w_ptr, wsrc_ptr, dw_ptr, NH, Nq, Nk,
                     Hq, Wq, Hk, Wk, K: tl.constexpr,
                     OVER_KEYS: tl.constexpr, MIRROR: tl.constexpr,
                     WEIGHT_GRAD: tl.constexpr, BLOCK_Q: tl.constexpr,
                     BLOCK_K: tl.constexpr):
    """One depthwise ``K x K`` conv of a tile of every (image, head) map,
    over the key grid (``OVER_KEYS``) or the query grid: ``dst = sum_t w_t
    src(shifted by t)``, the taps mirrored with ``MIRROR`` (a transposed
    conv). With ``WEIGHT_GRAD`` (a transposed conv of an output's
    gradient ``src``) also the tile's share of the forward conv weight's
    gradient, ``dw_t += sum src * wsrc(shifted by t)`` (unmirrored), where
    ``wsrc`` is that conv's input."""
    bh = tl.program_id(0)
    h = bh % NH
    offs_q = tl.program_id(1) * BLOCK_Q + tl.arange(0, BLOCK_Q)
    offs_k = tl.program_id(2) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask_q, mask_k = offs_q < Nq, offs_k < Nk
    base = bh.to(tl.int64) * Nq * Nk
    acc = tl.zeros([BLOCK_Q, BLOCK_K], tl.float32)
    if WEIGHT_GRAD:
        g = _tile(src_ptr + base, offs_q, mask_q, offs_k, mask_k, Nk)
    sign: tl.constexpr = -1 if MIRROR else 1
    for t in tl.static_range(K * K):
        dy, dx = t // K - K // 2, t % K - K // 2
        w = tl.load(w_ptr + h * K * K + t).to(tl.float32)
        acc += w * _shifted(src_ptr + base, offs_q, mask_q, offs_k, mask_k,
                            Nk, Hq, Wq, Hk, Wk, sign * dy, sign * dx,
                            OVER_KEYS)
        if WEIGHT_GRAD:
            tile = _shifted(wsrc_ptr + base, offs_q, mask_q, offs_k, mask_k,
                            Nk, Hq, Wq, Hk, Wk, dy, dx, OVER_KEYS)
            tl.atomic_add(dw_ptr + h * K * K + t,
                          tl.sum(tl.sum(g * tile, 1), 0))
    tl.store(dst_ptr + base + offs_q[:, None] * Nk + offs_k[None, :],
             acc.to(dst_ptr.dtype.element_ty),
             mask=mask_q[:, None] & mask_k[None, :])
