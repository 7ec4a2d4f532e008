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

With the transform's 1x1 head mix ``M`` folded in, the query conv and the
mix are one pass each way (:func:`mixed_conv_pass_kernel`), where the mix
took another::

    Y_o = sum_i M_oi Q_i,  Q_i = wq_i * X_i
    dX_i = wq_i^T * dQ_i,  dQ_i = sum_o M_oi dY_o
    dM_oi = sum dY_o Q_i   dwq_ia = sum dQ_i X_i(i+a)

(``o``, ``i``: output and input heads): per program ``K * K + heads``
weight-gradient sums, not ``K * K`` for every pair of heads.
"""
import triton
import triton.language as tl

BLOCK_Q = 16
BLOCK_K = 64
#: Warps per program: on 4, the mixed query pass's transpose held more
#: than 255 registers a thread in bf16 and spilled (the GPU suite's tuning
#: section tries others).
NUM_WARPS = 8


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
def _program_tile(NH, Nq, Nk, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr):
    """This program's (image, head) map ``bh`` (grid axis 0), its head
    ``h``, its tile of queries and keys (axes 1, 2) with their masks, and
    the map's offset."""
    bh = tl.program_id(0)
    offs_q = tl.program_id(1) * BLOCK_Q + tl.arange(0, BLOCK_Q)
    offs_k = tl.program_id(2) * BLOCK_K + tl.arange(0, BLOCK_K)
    return (bh, bh % NH, offs_q, offs_q < Nq, offs_k, offs_k < Nk,
            bh.to(tl.int64) * Nq * Nk)


@triton.jit
def _conv_tile(ptr, w_ptr, offs_q, mask_q, offs_k, mask_k, Nk, Hq, Wq, Hk,
               Wk, K: tl.constexpr, OVER_KEYS: tl.constexpr,
               MIRROR: tl.constexpr):
    """A tile of one map's depthwise ``K x K`` conv (taps at ``w_ptr``),
    mirrored with ``MIRROR`` (the transposed conv), in fp32."""
    acc = tl.zeros([offs_q.shape[0], offs_k.shape[0]], tl.float32)
    sign: tl.constexpr = -1 if MIRROR else 1
    for t in tl.static_range(K * K):
        dy, dx = t // K - K // 2, t % K - K // 2
        acc += tl.load(w_ptr + t).to(tl.float32) * _shifted(
            ptr, offs_q, mask_q, offs_k, mask_k, Nk, Hq, Wq, Hk, Wk,
            sign * dy, sign * dx, OVER_KEYS)
    return acc


@triton.jit
def _add_tap_grads(dw_ptr, g, ptr, offs_q, mask_q, offs_k, mask_k, Nk, Hq,
                   Wq, Hk, Wk, K: tl.constexpr, OVER_KEYS: tl.constexpr):
    """A tile's share of a conv's weight gradient, ``dw_t += sum g *
    input(shifted by t)`` for the conv's output gradient ``g`` (unshifted)
    and its input at ``ptr``: one fp32 atomic per tap."""
    for t in tl.static_range(K * K):
        dy, dx = t // K - K // 2, t % K - K // 2
        tile = _shifted(ptr, offs_q, mask_q, offs_k, mask_k, Nk, Hq, Wq, Hk,
                        Wk, dy, dx, OVER_KEYS)
        tl.atomic_add(dw_ptr + t, tl.sum(tl.sum(g * tile, 1), 0))


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
    bh, h, offs_q, mask_q, offs_k, mask_k, base = _program_tile(
        NH, Nq, Nk, BLOCK_Q, BLOCK_K)
    if WEIGHT_GRAD:  # first: the conv after it (Triton 3.6 spilled)
        g = _tile(src_ptr + base, offs_q, mask_q, offs_k, mask_k, Nk)
        _add_tap_grads(dw_ptr + h * K * K, g, wsrc_ptr + base, offs_q,
                       mask_q, offs_k, mask_k, Nk, Hq, Wq, Hk, Wk, K,
                       OVER_KEYS)
    acc = _conv_tile(src_ptr + base, w_ptr + h * K * K, offs_q, mask_q,
                     offs_k, mask_k, Nk, Hq, Wq, Hk, Wk, K, OVER_KEYS,
                     MIRROR)
    tl.store(dst_ptr + base + offs_q[:, None] * Nk + offs_k[None, :],
             acc.to(dst_ptr.dtype.element_ty),
             mask=mask_q[:, None] & mask_k[None, :])


@triton.jit
def mixed_conv_pass_kernel(src_ptr, dst_ptr, w_ptr, mix_ptr, wsrc_ptr,
                           dw_ptr, dmix_ptr, NH, Nq, Nk, Hq, Wq, Hk, Wk,
                           K: tl.constexpr, TRANSPOSED: tl.constexpr,
                           BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr):
    """The query conv with the head mix after it, of a tile of every
    (image, head) map: ``dst_o = sum_i M_oi (w_i * src_i)``. Its transpose
    (``TRANSPOSED``), of the gradient ``src`` of that conv's output, for
    the input head ``i`` of this program: ``dst_i = w_i^T * (sum_o M_oi
    src_o)``, and the tile's shares of ``dw_i`` and ``dM_oi`` (``wsrc``:
    the forward conv's input)."""
    bh, h, offs_q, mask_q, offs_k, mask_k, base = _program_tile(
        NH, Nq, Nk, BLOCK_Q, BLOCK_K)
    acc = tl.zeros([BLOCK_Q, BLOCK_K], tl.float32)
    dconv = tl.zeros([BLOCK_Q, BLOCK_K], tl.float32)
    for other in range(0, NH):
        src_base = (bh - h + other).to(tl.int64) * Nq * Nk
        if TRANSPOSED:  # other: an output head of the forward conv
            m = tl.load(mix_ptr + other * NH + h).to(tl.float32)
            acc += m * _conv_tile(src_ptr + src_base, w_ptr + h * K * K,
                                  offs_q, mask_q, offs_k, mask_k, Nk, Hq, Wq,
                                  Hk, Wk, K, False, True)
            dconv += m * _tile(src_ptr + src_base, offs_q, mask_q, offs_k,
                               mask_k, Nk)
        else:  # other: an input head
            m = tl.load(mix_ptr + h * NH + other).to(tl.float32)
            acc += m * _conv_tile(src_ptr + src_base, w_ptr + other * K * K,
                                  offs_q, mask_q, offs_k, mask_k, Nk, Hq, Wq,
                                  Hk, Wk, K, False, False)
    if TRANSPOSED:
        # The weight gradients after the loop, which then holds two tiles
        # (with them in it, the compiler spilled): this head's conv
        # before the mix again, each tap's tile read once for it and for
        # the tap's gradient, then the mix's gradient against each
        # output head's.
        conv = tl.zeros([BLOCK_Q, BLOCK_K], tl.float32)
        for t in tl.static_range(K * K):
            dy, dx = t // K - K // 2, t % K - K // 2
            tile = _shifted(wsrc_ptr + base, offs_q, mask_q, offs_k, mask_k,
                            Nk, Hq, Wq, Hk, Wk, dy, dx, False)
            conv += tl.load(w_ptr + h * K * K + t).to(tl.float32) * tile
            tl.atomic_add(dw_ptr + h * K * K + t,
                          tl.sum(tl.sum(dconv * tile, 1), 0))
        for other in range(0, NH):
            g = _tile(src_ptr + (bh - h + other).to(tl.int64) * Nq * Nk,
                      offs_q, mask_q, offs_k, mask_k, Nk)
            tl.atomic_add(dmix_ptr + other * NH + h,
                          tl.sum(tl.sum(g * conv, 1), 0))
    tl.store(dst_ptr + base + offs_q[:, None] * Nk + offs_k[None, :],
             acc.to(dst_ptr.dtype.element_ty),
             mask=mask_q[:, None] & mask_k[None, :])
