"""Triton kernels of mean-shift attention (the custom op of
:mod:`vitattn_mm.ops.mean_shift_attention`): flash attention whose logits
carry MSF's key-norm term, a bias shared by the batch and a per-window
mask, with the probe subtracted from the output.

Per image (or window) ``b`` and head ``h``, with scale ``s``::

    logits_ij = s q_i . k_j - s ||k_j||^2 / 2 + bias_h,ij + mask_(b % nW),ij
    out_i = softmax_j(logits_i) v - p_i

read from, and written to, the packed layouts the projections use: ``qkv``
is ``(B, N, parts * C)`` (q, k, v, p), the output ``(B, N, C)`` with the
heads merged. Forward: online softmax over key blocks. Backward (flash
attention's): the rows' log-sum-exp again (the forward kernel without its
output), one kernel per query block (``delta`` and ``dq``, and the probe's
``-dout``), then one per key block accumulating ``dk``, ``dv`` over the
query blocks (and the bias gradient, fp32 atomics). The key-norm term's
gradient is ``-s k_j sum_i dlogits_ij``.

``UPCAST`` computes the products in fp32 instead of in the inputs' bf16:
only under Triton's interpreter (3.8), which gets bf16 ``tl.dot`` wrong;
fp16 and fp32 products run as they are there too.
"""
import triton
import triton.language as tl

from .triton_tiles import head_tile, online_softmax_step, program_rows

#: Query and key tile.
BLOCK = 64
#: Warps per program: with 8 no bf16 kernel spills a register, where
#: Triton's default 4 spilled up to 144 B a thread (``tools/
#: compile_kernels.py``, sm_90). The GPU suite's tuning section tries
#: others.
NUM_WARPS = 8


@triton.jit
def _logits(q, k, kn, bias_ptr, mask_ptr, b, h, offs_m, offs_n, mask_m, mask_n,
            N, NW, scale, MEAN_SHIFT: tl.constexpr, HAS_BIAS: tl.constexpr,
            HAS_MASK: tl.constexpr):
    """``[BLOCK_M, BLOCK_N]`` fp32 logits, -inf past the last key."""
    s = tl.dot(q, tl.trans(k), input_precision='ieee').to(tl.float32) * scale
    if MEAN_SHIFT:
        s -= (0.5 * scale) * kn[None, :]
    both = mask_m[:, None] & mask_n[None, :]
    pairs = offs_m[:, None] * N + offs_n[None, :]
    if HAS_BIAS:
        s += tl.load(bias_ptr + h * N * N + pairs, mask=both,
                     other=0.).to(tl.float32)
    if HAS_MASK:
        s += tl.load(mask_ptr + (b % NW) * N * N + pairs, mask=both,
                     other=0.).to(tl.float32)
    return tl.where(mask_n[None, :], s, float('-inf'))


@triton.jit
def forward_kernel(qkv_ptr, sb, sn, bias_ptr, mask_ptr, out_ptr, sob, son,
                   lse_ptr, N, C, NH, NW, scale, D, MEAN_SHIFT: tl.constexpr,
                   HAS_BIAS: tl.constexpr, HAS_MASK: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_D: tl.constexpr, UPCAST: tl.constexpr):
    """A query block's output and the rows' log-sum-exp (which the
    backward reads)."""
    bh, b, h, offs_m, mask_m, offs_d, mask_d = program_rows(
        N, NH, D, BLOCK_M, BLOCK_D)
    q = head_tile(qkv_ptr, sb, sn, b, offs_m, mask_m, h * D, offs_d, mask_d,
                  UPCAST)
    m_i = tl.full([BLOCK_M], float('-inf'), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for start in range(0, N, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        mask_n = offs_n < N
        k = head_tile(qkv_ptr, sb, sn, b, offs_n, mask_n, C + h * D, offs_d,
                      mask_d, UPCAST)
        kf = k.to(tl.float32)
        s = _logits(q, k, tl.sum(kf * kf, 1), bias_ptr, mask_ptr, b, h, offs_m,
                    offs_n, mask_m, mask_n, N, NW, scale, MEAN_SHIFT, HAS_BIAS,
                    HAS_MASK)
        v = head_tile(qkv_ptr, sb, sn, b, offs_n, mask_n, 2 * C + h * D,
                      offs_d, mask_d, UPCAST)
        m_i, l_i, acc = online_softmax_step(m_i, l_i, acc, s, v)
    out = acc / l_i[:, None]
    if MEAN_SHIFT:
        out -= head_tile(qkv_ptr, sb, sn, b, offs_m, mask_m, 3 * C + h * D,
                         offs_d, mask_d, UPCAST).to(tl.float32)
    tl.store(out_ptr + b * sob + offs_m[:, None] * son + h * D +
             offs_d[None, :],
             out.to(out_ptr.dtype.element_ty),
             mask=mask_m[:, None] & mask_d[None, :])
    tl.store(lse_ptr + bh * N + offs_m, m_i + tl.log(l_i), mask=mask_m)


@triton.jit
def key_backward_kernel(qkv_ptr, sb, sn, bias_ptr, mask_ptr, g_ptr, sgb, sgn,
                        lse_ptr, delta_ptr, dqkv_ptr, sdb, sdn, dbias_ptr,
                        SLOTS, N, C, NH, NW, scale, D,
                        MEAN_SHIFT: tl.constexpr,
                        HAS_BIAS: tl.constexpr, BIAS_GRAD: tl.constexpr,
                        HAS_MASK: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                        UPCAST: tl.constexpr):
    """A key block: ``dk``, ``dv`` over every query block, and the bias
    gradient's share, added into slot ``b % SLOTS`` of ``dbias`` (every
    window of a head adds into the same ``N x N`` table: spread over slots,
    the atomics contend ``SLOTS`` times less; the op sums the slots)."""
    bh, b, h, offs_n, mask_n, offs_d, mask_d = program_rows(
        N, NH, D, BLOCK_N, BLOCK_D)
    k = head_tile(qkv_ptr, sb, sn, b, offs_n, mask_n, C + h * D, offs_d,
                  mask_d, UPCAST)
    v = head_tile(qkv_ptr, sb, sn, b, offs_n, mask_n, 2 * C + h * D, offs_d,
                  mask_d, UPCAST)
    kf = k.to(tl.float32)
    kn = tl.sum(kf * kf, 1)
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    column = tl.zeros([BLOCK_N], tl.float32)
    for start in range(0, N, BLOCK_M):
        offs_m = start + tl.arange(0, BLOCK_M)
        mask_m = offs_m < N
        q = head_tile(qkv_ptr, sb, sn, b, offs_m, mask_m, h * D, offs_d,
                      mask_d, UPCAST)
        g = head_tile(g_ptr, sgb, sgn, b, offs_m, mask_m, h * D, offs_d,
                      mask_d, UPCAST)
        lse = tl.load(lse_ptr + bh * N + offs_m, mask=mask_m, other=0.)
        delta = tl.load(delta_ptr + bh * N + offs_m, mask=mask_m, other=0.)
        s = _logits(q, k, kn, bias_ptr, mask_ptr, b, h, offs_m, offs_n, mask_m,
                    mask_n, N, NW, scale, MEAN_SHIFT, HAS_BIAS, HAS_MASK)
        p = tl.where(mask_m[:, None], tl.exp(s - lse[:, None]), 0.)
        dv += tl.dot(tl.trans(p).to(g.dtype), g, input_precision='ieee')
        dp = tl.dot(g, tl.trans(v), input_precision='ieee').to(tl.float32)
        ds = p * (dp - delta[:, None])
        dk += tl.dot(tl.trans(ds).to(q.dtype), q, input_precision='ieee')
        column += tl.sum(ds, 0)
        if BIAS_GRAD:
            tl.atomic_add(dbias_ptr + ((b % SLOTS) * NH + h) * N * N +
                          offs_m[:, None] * N + offs_n[None, :],
                          ds,
                          mask=mask_m[:, None] & mask_n[None, :])
    dk = dk * scale
    if MEAN_SHIFT:
        dk -= scale * column[:, None] * kf
    both = mask_n[:, None] & mask_d[None, :]
    base = dqkv_ptr + b * sdb + offs_n[:, None] * sdn + offs_d[None, :]
    tl.store(base + C + h * D, dk.to(dqkv_ptr.dtype.element_ty), mask=both)
    tl.store(base + 2 * C + h * D, dv.to(dqkv_ptr.dtype.element_ty), mask=both)


@triton.jit
def _key_block(qkv_ptr, sb, sn, bias_ptr, mask_ptr, q, g, lse, b, h, start,
               offs_m, mask_m, offs_d, mask_d, N, C, NW, scale, D,
               MEAN_SHIFT: tl.constexpr, HAS_BIAS: tl.constexpr,
               HAS_MASK: tl.constexpr, BLOCK_N: tl.constexpr,
               UPCAST: tl.constexpr):
    """For the key block at ``start``: its keys, the probabilities and
    ``dp = dout v^T`` of the query block."""
    offs_n = start + tl.arange(0, BLOCK_N)
    mask_n = offs_n < N
    k = head_tile(qkv_ptr, sb, sn, b, offs_n, mask_n, C + h * D, offs_d,
                  mask_d, UPCAST)
    v = head_tile(qkv_ptr, sb, sn, b, offs_n, mask_n, 2 * C + h * D, offs_d,
                  mask_d, UPCAST)
    kf = k.to(tl.float32)
    s = _logits(q, k, tl.sum(kf * kf,
                             1), bias_ptr, mask_ptr, b, h, offs_m, offs_n,
                mask_m, mask_n, N, NW, scale, MEAN_SHIFT, HAS_BIAS, HAS_MASK)
    p = tl.where(mask_m[:, None], tl.exp(s - lse[:, None]), 0.)
    dp = tl.dot(g, tl.trans(v), input_precision='ieee').to(tl.float32)
    return k, p, dp


@triton.jit
def query_backward_kernel(qkv_ptr, sb, sn, bias_ptr, mask_ptr, g_ptr, sgb, sgn,
                          lse_ptr, delta_ptr, dqkv_ptr, sdb, sdn, N, C, NH, NW,
                          scale, D, MEAN_SHIFT: tl.constexpr,
                          HAS_BIAS: tl.constexpr, HAS_MASK: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          BLOCK_D: tl.constexpr, UPCAST: tl.constexpr):
    """A query block: ``delta_i = sum_j p_ij dp_ij`` (for the key kernel,
    which runs after), ``dq`` over every key block, and the probe's
    gradient ``-dout``.

    ``delta`` is ``dout . attention`` summed over keys in fp32, not read
    off the stored output: that one is rounded to the output's dtype after
    the probe was subtracted, and ``dp - delta`` cancels.
    """
    bh, b, h, offs_m, mask_m, offs_d, mask_d = program_rows(
        N, NH, D, BLOCK_M, BLOCK_D)
    q = head_tile(qkv_ptr, sb, sn, b, offs_m, mask_m, h * D, offs_d, mask_d,
                  UPCAST)
    g = head_tile(g_ptr, sgb, sgn, b, offs_m, mask_m, h * D, offs_d, mask_d,
                  UPCAST)
    lse = tl.load(lse_ptr + bh * N + offs_m, mask=mask_m, other=0.)
    delta = tl.zeros([BLOCK_M], tl.float32)
    for start in range(0, N, BLOCK_N):
        k, p, dp = _key_block(qkv_ptr, sb, sn, bias_ptr, mask_ptr, q, g, lse,
                              b, h, start, offs_m, mask_m, offs_d, mask_d, N,
                              C, NW, scale, D, MEAN_SHIFT, HAS_BIAS, HAS_MASK,
                              BLOCK_N, UPCAST)
        delta += tl.sum(p * dp, 1)
    tl.store(delta_ptr + bh * N + offs_m, delta, mask=mask_m)
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for start in range(0, N, BLOCK_N):
        k, p, dp = _key_block(qkv_ptr, sb, sn, bias_ptr, mask_ptr, q, g, lse,
                              b, h, start, offs_m, mask_m, offs_d, mask_d, N,
                              C, NW, scale, D, MEAN_SHIFT, HAS_BIAS, HAS_MASK,
                              BLOCK_N, UPCAST)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision='ieee')
    both = mask_m[:, None] & mask_d[None, :]
    base = dqkv_ptr + b * sdb + offs_m[:, None] * sdn + offs_d[None, :]
    tl.store(base + h * D, (dq * scale).to(dqkv_ptr.dtype.element_ty),
             mask=both)
    if MEAN_SHIFT:
        tl.store(base + 3 * C + h * D, (-g).to(dqkv_ptr.dtype.element_ty),
                 mask=both)
