"""Triton kernels of the linear attentions: FLatten's focused and L2ViT's
ReLU kernel (the custom ops of :mod:`vitattn_mm.ops.linear_attention`).

Per image ``b`` and head ``h``, with features ``phi`` of queries and keys
(fp32 throughout, whatever the inputs' dtype)::

    S = T * sum_j phi(k_j)^T v_j          (d x d, in fp32)
    m = A * sum_j phi(k_j)                (d)
    z_i = 1 / max(phi(q_i) . m + EPS, DMIN)
    out_i = z_i * phi(q_i) S  [+ depthwise conv of a value map]

FLatten: ``T = A = 1 / n``, ``EPS = 1e-6``, no clamp, ``phi`` the focused
ReLU over all C channels of a token (so a token's heads are read
together); L2ViT: ``T`` a learned per-head temperature, ``A = 1``, ``EPS =
0``, ``DMIN`` the denominator's floor, ``phi = ReLU``.

Forward: one kernel over key blocks accumulates ``S`` and ``m`` (fp32
atomics), one over query blocks writes the output with the depthwise conv
added. Backward: one kernel over query blocks (gradients of the queries,
of ``S`` and ``m``, of the conv's weights and input), one over key blocks
(keys, values, position table). The focusing function couples a token's
channels, so its gradient takes a second pass over the heads (recomputed,
not stored).
"""
import triton
import triton.language as tl

from .triton_depthwise import dwc_tile, dwc_tile_backward

#: Tokens per program (query and key blocks alike), and warps per
#: program. With 16 and 8 (and the :data:`CHUNK` products) no kernel
#: spills a register for 32-wide heads (FLatten-Swin, -PVTv2, -CSwin,
#: L2ViT) and a 64-wide head's query backward 64 B a thread in bf16,
#: where 32 tokens and 4 warps spilled up to 368 B and 7.4 KB
#: (``tools/compile_kernels.py``, sm_90). The GPU suite's tuning section
#: tries others.
BLOCK_N = 16
NUM_WARPS = 8
#: Precision of the products of the fp32 features (``tl.dot``'s
#: ``input_precision``): 'ieee', eager fp32's (CUDA cores); the GPU
#: suite's tuning section tries 'tf32x3', three TF32 tensor-core products
#: that recover fp32's precision to about an ulp.
DOT_PRECISION = 'ieee'
NO_CLAMP = -3.0e38


@triton.jit
def _tile(ptr, sb, sn, b, offs_n, mask_n, col, offs_d, mask_d):
    """fp32 ``[BLOCK_N, BLOCK_D]`` tile: tokens ``offs_n`` of image ``b``,
    channels ``col + offs_d``."""
    ptrs = ptr + b * sb + offs_n[:, None] * sn + col + offs_d[None, :]
    mask = mask_n[:, None] & mask_d[None, :]
    return tl.load(ptrs, mask=mask, other=0.).to(tl.float32)


@triton.jit
def _inputs(ptr, sb, sn, pos_ptr, spn, s_ptr, b, offs_n, mask_n, col,
            offs_d, mask_d, HAS_POS: tl.constexpr, FOCUSED: tl.constexpr):
    """The input ``a`` (position added) and ``x``: ``(relu(a) + 1e-6) / s``
    (focused) or ``relu(a)``; zero outside the tile."""
    a = _tile(ptr, sb, sn, b, offs_n, mask_n, col, offs_d, mask_d)
    mask = mask_n[:, None] & mask_d[None, :]
    if HAS_POS:
        a += tl.load(pos_ptr + offs_n[:, None] * spn + col + offs_d[None, :],
                     mask=mask, other=0.).to(tl.float32)
    if FOCUSED:
        s = tl.load(s_ptr + col + offs_d, mask=mask_d, other=1.)
        x = (tl.maximum(a, 0.) + 1e-6) / s[None, :]
    else:
        x = tl.maximum(a, 0.)
    return a, tl.where(mask, x, 0.)


@triton.jit
def _power(x, P, P_INT: tl.constexpr):
    """``x ** P`` for ``x >= 0`` (exact products for an integer P)."""
    if P_INT > 0:
        u = x
        for _ in tl.static_range(P_INT - 1):
            u = u * x
    else:
        u = tl.where(x > 0, tl.exp(P * tl.log(tl.maximum(x, 1e-30))), 0.)
    return u


@triton.jit
def _features(ptr, sb, sn, pos_ptr, spn, s_ptr, b, offs_n, mask_n, col,
              offs_d, mask_d, ratio, P, P_INT: tl.constexpr,
              HAS_POS: tl.constexpr, FOCUSED: tl.constexpr):
    """One head's input ``a``, ``x``, ``u = x ** P`` (``x`` for ReLU) and
    its feature ``phi = u * r / t`` (``x`` for ReLU)."""
    a, x = _inputs(ptr, sb, sn, pos_ptr, spn, s_ptr, b, offs_n, mask_n, col,
                   offs_d, mask_d, HAS_POS, FOCUSED)
    if FOCUSED:
        u = _power(x, P, P_INT)
        phi = u * ratio[:, None]
    else:
        u = x
        phi = x
    return a, x, u, phi


@triton.jit
def _norms(ptr, sb, sn, pos_ptr, spn, s_ptr, b, offs_n, mask_n, offs_d,
           mask_d, D, NH, P, P_INT: tl.constexpr, HAS_POS: tl.constexpr,
           FOCUSED: tl.constexpr):
    """``r = ||x||`` and ``t = ||x ** P||`` over all C channels of each
    token, and the focusing factor ``r / t`` (zero outside the block; all
    zero unless ``FOCUSED``)."""
    r2 = tl.zeros([offs_n.shape[0]], tl.float32)
    t2 = tl.zeros([offs_n.shape[0]], tl.float32)
    if FOCUSED:
        for h in range(NH):
            _, x = _inputs(ptr, sb, sn, pos_ptr, spn, s_ptr, b, offs_n,
                           mask_n, h * D, offs_d, mask_d, HAS_POS, True)
            u = _power(x, P, P_INT)
            r2 += tl.sum(x * x, 1)
            t2 += tl.sum(u * u, 1)
    r, t = tl.sqrt(r2), tl.sqrt(t2)
    return r, t, tl.where(mask_n, r / tl.where(t > 0, t, 1.), 0.)


@triton.jit
def _program_tokens(length, D, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """This program's image, its block of tokens and the channels of a
    head, each with its mask."""
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    return (tl.program_id(0).to(tl.int64), offs_n, offs_n < length, offs_d,
            offs_d < D)


@triton.jit
def _state_offsets(b, h, NH, D, offs_d):
    base = (b * NH + h) * D
    return base * D + offs_d[:, None] * D + offs_d[None, :], base + offs_d


@triton.jit
def _head_sum(ptr, b, h, NH, D, offs_d, mask_d, A):
    """Head ``h``'s ``m`` (or its gradient), times ``A``."""
    _, m_off = _state_offsets(b, h, NH, D, offs_d)
    return tl.load(ptr + m_off, mask=mask_d, other=0.) * A


@triton.jit
def _temperature(temp_ptr, h, T, PER_HEAD_T: tl.constexpr):
    if PER_HEAD_T:
        T = T * tl.load(temp_ptr + h).to(tl.float32)
    return T


@triton.jit
def state_kernel(k_ptr, skb, skn, v_ptr, svb, svn, pos_ptr, spn, s_ptr,
                 state_ptr, ksum_ptr, n, D, NH, P, P_INT: tl.constexpr,
                 HAS_POS: tl.constexpr, FOCUSED: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                 DOT: tl.constexpr):
    """``sum_j phi(k_j)^T v_j`` and ``sum_j phi(k_j)`` of a key block,
    added to the image's fp32 sums."""
    b, offs_n, mask_n, offs_d, mask_d = _program_tokens(n, D, BLOCK_N,
                                                        BLOCK_D)
    _r, _t, ratio = _norms(k_ptr, skb, skn, pos_ptr, spn, s_ptr, b, offs_n,
                         mask_n, offs_d, mask_d, D, NH, P, P_INT, HAS_POS,
                         FOCUSED)
    for h in range(NH):
        _, _, _, x = _features(k_ptr, skb, skn, pos_ptr, spn, s_ptr, b,
                               offs_n, mask_n, h * D, offs_d, mask_d, ratio,
                               P, P_INT, HAS_POS, FOCUSED)
        v = _tile(v_ptr, svb, svn, b, offs_n, mask_n, h * D, offs_d, mask_d)
        s_off, m_off = _state_offsets(b, h, NH, D, offs_d)
        tl.atomic_add(state_ptr + s_off,
                      tl.dot(tl.trans(x), v, input_precision=DOT),
                      mask=mask_d[:, None] & mask_d[None, :])
        tl.atomic_add(ksum_ptr + m_off, tl.sum(x, 0), mask=mask_d)


@triton.jit
def output_kernel(q_ptr, sqb, sqn, s_ptr, state_ptr, ksum_ptr, temp_ptr,
                  map_ptr, smb, smc, smh, smw, w_ptr, bias_ptr, out_ptr, sob,
                  son, N, H, W, D, NH, CW, T, A, EPS, DMIN, P,
                  P_INT: tl.constexpr, FOCUSED: tl.constexpr,
                  PER_HEAD_T: tl.constexpr, HAS_DWC: tl.constexpr,
                  K: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_D: tl.constexpr, DOT: tl.constexpr):
    """``z_i phi(q_i) S`` (+ the depthwise conv) of a query block."""
    b, offs_n, mask_n, offs_d, mask_d = _program_tokens(N, D, BLOCK_N,
                                                        BLOCK_D)
    mask_dd = mask_d[:, None] & mask_d[None, :]
    _r, _t, ratio = _norms(q_ptr, sqb, sqn, q_ptr, 0, s_ptr, b, offs_n,
                         mask_n, offs_d, mask_d, D, NH, P, P_INT, False,
                         FOCUSED)
    for h in range(NH):
        _, _, _, x = _features(q_ptr, sqb, sqn, q_ptr, 0, s_ptr, b, offs_n,
                               mask_n, h * D, offs_d, mask_d, ratio, P,
                               P_INT, False, FOCUSED)
        s_off, _ = _state_offsets(b, h, NH, D, offs_d)
        S = tl.load(state_ptr + s_off, mask=mask_dd, other=0.)
        m = _head_sum(ksum_ptr, b, h, NH, D, offs_d, mask_d, A)
        den = tl.sum(x * m[None, :], 1) + EPS
        z = 1. / tl.maximum(den, DMIN)
        T_h = _temperature(temp_ptr, h, T, PER_HEAD_T)
        o = tl.dot(x, S, input_precision=DOT) * (T_h * z)[:, None]
        if HAS_DWC:
            o += dwc_tile(map_ptr, smb, smc, smh, smw, w_ptr, bias_ptr, b,
                          offs_n, mask_n, h * D, offs_d, mask_d, H, W, CW,
                          K)
        tl.store(out_ptr + b * sob + offs_n[:, None] * son + h * D +
                 offs_d[None, :], o.to(out_ptr.dtype.element_ty),
                 mask=mask_n[:, None] & mask_d[None, :])


@triton.jit
def _focus_backward(dy, x, u, r, t, G, P):
    """Gradient of ``x`` through ``y = u * r / t`` (``u = x ** P``) given
    the token's ``G = sum_c dy_c u_c``."""
    t_safe = tl.where(t > 0, t, 1.)
    rt = tl.where(t > 0, r / t_safe, 0.)
    inv = tl.where(t > 0, 1. / (tl.where(r > 0, r, 1.) * t_safe), 0.)
    upm1 = tl.where(x > 0, u / tl.maximum(x, 1e-30), 0.)
    inv_t2 = tl.where(t > 0, 1. / (t_safe * t_safe), 0.)
    return (G * inv)[:, None] * x + rt[:, None] * P * upm1 * (
        dy - (G * inv_t2)[:, None] * u)


@triton.jit
def _query_grad(q_ptr, sqb, sqn, s_ptr, g_ptr, sgb, sgn, state_ptr,
                ksum_ptr, T_h, b, h, offs_n, mask_n, offs_d, mask_d, ratio,
                D, NH, A, EPS, DMIN, P, P_INT: tl.constexpr,
                FOCUSED: tl.constexpr, BLOCK_D: tl.constexpr,
                DOT: tl.constexpr):
    """Head ``h`` of a query block: ``a``, ``x``, ``u``, the feature
    ``phi``, the output gradient ``g``, ``z``, ``g . o``, whether the
    denominator passes the floor, and ``dphi``."""
    a, x, u, phi = _features(q_ptr, sqb, sqn, q_ptr, 0, s_ptr, b, offs_n,
                             mask_n, h * D, offs_d, mask_d, ratio, P, P_INT,
                             False, FOCUSED)
    m = _head_sum(ksum_ptr, b, h, NH, D, offs_d, mask_d, A)
    g = _tile(g_ptr, sgb, sgn, b, offs_n, mask_n, h * D, offs_d, mask_d)
    den = tl.sum(phi * m[None, :], 1) + EPS
    z = tl.where(mask_n, 1. / tl.maximum(den, DMIN), 0.)
    passes = (den >= DMIN) & mask_n
    # g . o = z phi . (g S^T): the output is not computed again (a
    # product and its registers fewer per head).
    gs = _times_state_t(g_ptr, sgb, sgn, state_ptr, b, h, offs_n, mask_n,
                        offs_d, mask_d, D, NH, T_h, BLOCK_D, DOT)
    go = z * tl.sum(phi * gs, 1)
    dphi = gs * z[:, None] - tl.where(passes, z * go, 0.)[:, None] * \
        m[None, :]
    return a, x, u, phi, g, z, go, passes, dphi


@triton.jit
def query_backward_kernel(
        q_ptr, sqb, sqn, s_ptr, g_ptr, sgb, sgn, state_ptr, ksum_ptr,
        temp_ptr, dstate_ptr, dksum_ptr, dq_ptr, sdqb, sdqn, ds_ptr, map_ptr,
        smb, smc, smh, smw, w_ptr, dw_ptr, db_ptr, dmap_ptr, sdmb, sdmc,
        sdmh, sdmw, N, H, W, D, NH, CW, T, A, EPS, DMIN, P,
        P_INT: tl.constexpr, FOCUSED: tl.constexpr,
        PER_HEAD_T: tl.constexpr, HAS_DWC: tl.constexpr, K: tl.constexpr,
        BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
        DOT: tl.constexpr):
    """Query block: ``dq``, its share of ``dS``, ``dm``, ``ds`` and of the
    conv's weight and bias gradients, and the conv input's gradient at
    these tokens."""
    b, offs_n, mask_n, offs_d, mask_d = _program_tokens(N, D, BLOCK_N,
                                                        BLOCK_D)
    mask = mask_n[:, None] & mask_d[None, :]
    r, t, ratio = _norms(q_ptr, sqb, sqn, q_ptr, 0, s_ptr, b, offs_n,
                         mask_n, offs_d, mask_d, D, NH, P, P_INT, False,
                         FOCUSED)
    G = tl.zeros([BLOCK_N], tl.float32)
    for h in range(NH):
        T_h = _temperature(temp_ptr, h, T, PER_HEAD_T)
        a, x, u, phi, g, z, go, passes, dphi = _query_grad(
            q_ptr, sqb, sqn, s_ptr, g_ptr, sgb, sgn, state_ptr, ksum_ptr,
            T_h, b, h, offs_n, mask_n, offs_d, mask_d, ratio, D, NH, A, EPS,
            DMIN, P, P_INT, FOCUSED, BLOCK_D, DOT)
        s_off, m_off = _state_offsets(b, h, NH, D, offs_d)
        # dS is w.r.t. T * S_raw; the key pass multiplies by T.
        tl.atomic_add(dstate_ptr + s_off,
                      tl.dot(tl.trans(phi * z[:, None]), g,
                             input_precision=DOT),
                      mask=mask_d[:, None] & mask_d[None, :])
        tl.atomic_add(dksum_ptr + m_off,
                      -tl.sum(tl.where(passes, z * go, 0.)[:, None] * phi,
                              0), mask=mask_d)
        if FOCUSED:
            G += tl.sum(dphi * u, 1)
        else:
            tl.store(dq_ptr + b * sdqb + offs_n[:, None] * sdqn + h * D +
                     offs_d[None, :],
                     tl.where(a > 0, dphi, 0.).to(dq_ptr.dtype.element_ty),
                     mask=mask)
    if HAS_DWC:
        # A pass of its own: the conv's gradients read the output's alone,
        # and the attention's tiles are no longer live (fewer spills).
        for h in range(NH):
            g = _tile(g_ptr, sgb, sgn, b, offs_n, mask_n, h * D, offs_d,
                      mask_d)
            dwc_tile_backward(g, map_ptr, smb, smc, smh, smw, g_ptr, sgb,
                              sgn, w_ptr, dw_ptr, db_ptr, dmap_ptr, sdmb,
                              sdmc, sdmh, sdmw, b, offs_n, mask_n, h * D,
                              offs_d, mask_d, H, W, CW, K)
    if FOCUSED:
        for h in range(NH):
            T_h = _temperature(temp_ptr, h, T, PER_HEAD_T)
            a, x, u, phi, g, z, go, passes, dphi = _query_grad(
                q_ptr, sqb, sqn, s_ptr, g_ptr, sgb, sgn, state_ptr,
                ksum_ptr, T_h, b, h, offs_n, mask_n, offs_d, mask_d, ratio,
                D, NH, A, EPS, DMIN, P, P_INT, FOCUSED, BLOCK_D, DOT)
            dx = _focus_backward(dphi, x, u, r, t, G, P)
            s = tl.load(s_ptr + h * D + offs_d, mask=mask_d, other=1.)
            tl.store(dq_ptr + b * sdqb + offs_n[:, None] * sdqn + h * D +
                     offs_d[None, :],
                     tl.where(a > 0, dx / s[None, :],
                              0.).to(dq_ptr.dtype.element_ty), mask=mask)
            tl.atomic_add(ds_ptr + h * D + offs_d,
                          -tl.sum(tl.where(mask, dx * x, 0.), 0) / s,
                          mask=mask_d)


#: Channels of a head a product over its ``d x d`` state (or the state's
#: gradient) contracts at once: each thread holds whole rows and columns
#: of a CUDA-core product's operands, and a 64-wide head's whole state
#: overflowed the registers; the backward sums two 32-channel products.
CHUNK = tl.constexpr(32)


@triton.jit
def _times_state_t(x_ptr, sxb, sxn, state_ptr, b, h, offs_n, mask_n,
                   offs_d, mask_d, D, NH, T_h, BLOCK_D: tl.constexpr,
                   DOT: tl.constexpr):
    """A head's tile times its ``d x d`` state (or the state's gradient)
    transposed, ``[BLOCK_N, BLOCK_D]`` (times ``T_h``): ``g S^T`` of the
    output's gradient, ``v dS^T`` of the values; summed over chunks of the
    tile's channels (:data:`CHUNK`)."""
    C: tl.constexpr = CHUNK if BLOCK_D > CHUNK else BLOCK_D
    offs_c = tl.arange(0, C)
    base = (b * NH + h) * D
    acc = tl.zeros([offs_n.shape[0], BLOCK_D], tl.float32)
    for c in tl.static_range(BLOCK_D // C):
        cols = c * C + offs_c
        mask_c = cols < D
        xc = _tile(x_ptr, sxb, sxn, b, offs_n, mask_n, h * D + c * C,
                   offs_c, mask_c)
        Sc = tl.load(state_ptr + base * D + offs_d[:, None] * D +
                     cols[None, :], mask=mask_d[:, None] & mask_c[None, :],
                     other=0.)
        acc += tl.dot(xc, tl.trans(Sc), input_precision=DOT)
    return acc * T_h


@triton.jit
def _powers_by_state_grad(k_ptr, skb, skn, pos_ptr, spn, s_ptr, dstate_ptr,
                          dksum_ptr, b, h, offs_n, mask_n, offs_d, mask_d,
                          ratio, D, NH, T_h, A, P, P_INT: tl.constexpr,
                          HAS_POS: tl.constexpr, FOCUSED: tl.constexpr,
                          BLOCK_D: tl.constexpr, DOT: tl.constexpr):
    """The keys' ``u dS`` (``[BLOCK_N, BLOCK_D]``; ``u = x ** P``, or the
    ReLU features) and ``u . dm`` (``dm`` times ``A``), over chunks of
    ``u``'s channels as :func:`_times_state_t`."""
    C: tl.constexpr = CHUNK if BLOCK_D > CHUNK else BLOCK_D
    offs_c = tl.arange(0, C)
    base = (b * NH + h) * D
    acc = tl.zeros([offs_n.shape[0], BLOCK_D], tl.float32)
    udm = tl.zeros([offs_n.shape[0]], tl.float32)
    for c in tl.static_range(BLOCK_D // C):
        rows = c * C + offs_c
        mask_c = rows < D
        _, _, uc, _ = _features(k_ptr, skb, skn, pos_ptr, spn, s_ptr, b,
                                offs_n, mask_n, h * D + c * C, offs_c,
                                mask_c, ratio, P, P_INT, HAS_POS, FOCUSED)
        dSc = tl.load(dstate_ptr + base * D + rows[:, None] * D +
                      offs_d[None, :], mask=mask_c[:, None] & mask_d[None, :],
                      other=0.)
        acc += tl.dot(uc, dSc, input_precision=DOT)
        udm += tl.sum(uc * tl.load(dksum_ptr + base + rows, mask=mask_c,
                                   other=0.)[None, :], 1)
    return acc * T_h, udm * A


@triton.jit
def key_backward_kernel(
        k_ptr, skb, skn, v_ptr, svb, svn, pos_ptr, spn, s_ptr, temp_ptr,
        dstate_ptr, dksum_ptr, dk_ptr, sdkb, sdkn, dv_ptr, sdvb, sdvn,
        dpos_ptr, sdpn, ds_ptr, n, D, NH, T, A, P, P_INT: tl.constexpr,
        HAS_POS: tl.constexpr, FOCUSED: tl.constexpr,
        PER_HEAD_T: tl.constexpr, ADD_DV: tl.constexpr,
        BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
        DOT: tl.constexpr):
    """Key block: ``dk``, ``dv`` (added to what is there with ``ADD_DV``:
    the conv's share when it ran on these values), the position table's
    gradient summed over images, and its share of ``ds``.

    ``dphi = v dS^T + dm`` and ``dv = phi dS``. Focused, the first pass
    over the heads needs ``dv`` and ``G = sum_c dphi_c u_c = v . (u dS) +
    u . dm`` only, both from the one product ``u dS`` (``phi = u r / t``),
    and the second ``dphi`` alone: one product per head and pass, each
    over chunks of the head's channels."""
    b, offs_n, mask_n, offs_d, mask_d = _program_tokens(n, D, BLOCK_N,
                                                        BLOCK_D)
    mask = mask_n[:, None] & mask_d[None, :]
    r, t, ratio = _norms(k_ptr, skb, skn, pos_ptr, spn, s_ptr, b, offs_n,
                         mask_n, offs_d, mask_d, D, NH, P, P_INT, HAS_POS,
                         FOCUSED)
    G = tl.zeros([BLOCK_N], tl.float32)
    for h in range(NH):
        T_h = _temperature(temp_ptr, h, T, PER_HEAD_T)
        w, udm = _powers_by_state_grad(
            k_ptr, skb, skn, pos_ptr, spn, s_ptr, dstate_ptr, dksum_ptr, b,
            h, offs_n, mask_n, offs_d, mask_d, ratio, D, NH, T_h, A, P,
            P_INT, HAS_POS, FOCUSED, BLOCK_D, DOT)
        if FOCUSED:
            v = _tile(v_ptr, svb, svn, b, offs_n, mask_n, h * D, offs_d,
                      mask_d)
            dv = w * ratio[:, None]
            G += tl.sum(v * w, 1) + udm
        else:  # phi = u: dv = u dS
            dv = w
            a, _ = _inputs(k_ptr, skb, skn, pos_ptr, spn, s_ptr, b, offs_n,
                           mask_n, h * D, offs_d, mask_d, HAS_POS, False)
            dphi = _times_state_t(
                v_ptr, svb, svn, dstate_ptr, b, h, offs_n, mask_n, offs_d,
                mask_d, D, NH, T_h, BLOCK_D, DOT) + _head_sum(
                    dksum_ptr, b, h, NH, D, offs_d, mask_d, A)[None, :]
            _store_key_grad(tl.where(a > 0, dphi, 0.), dk_ptr, sdkb, sdkn,
                            dpos_ptr, sdpn, b, offs_n, mask, h * D, offs_d,
                            HAS_POS)
        dv_ptrs = dv_ptr + b * sdvb + offs_n[:, None] * sdvn + h * D + \
            offs_d[None, :]
        if ADD_DV:
            dv += tl.load(dv_ptrs, mask=mask, other=0.).to(tl.float32)
        tl.store(dv_ptrs, dv.to(dv_ptr.dtype.element_ty), mask=mask)
    if FOCUSED:
        for h in range(NH):
            T_h = _temperature(temp_ptr, h, T, PER_HEAD_T)
            a, x, u, _ = _features(k_ptr, skb, skn, pos_ptr, spn, s_ptr, b,
                                   offs_n, mask_n, h * D, offs_d, mask_d,
                                   ratio, P, P_INT, HAS_POS, True)
            dphi = _times_state_t(
                v_ptr, svb, svn, dstate_ptr, b, h, offs_n, mask_n, offs_d,
                mask_d, D, NH, T_h, BLOCK_D, DOT) + _head_sum(
                    dksum_ptr, b, h, NH, D, offs_d, mask_d, A)[None, :]
            dx = _focus_backward(dphi, x, u, r, t, G, P)
            s = tl.load(s_ptr + h * D + offs_d, mask=mask_d, other=1.)
            _store_key_grad(tl.where(a > 0, dx / s[None, :], 0.), dk_ptr,
                            sdkb, sdkn, dpos_ptr, sdpn, b, offs_n, mask,
                            h * D, offs_d, HAS_POS)
            tl.atomic_add(ds_ptr + h * D + offs_d,
                          -tl.sum(tl.where(mask, dx * x, 0.), 0) / s,
                          mask=mask_d)


@triton.jit
def _store_key_grad(da, dk_ptr, sdkb, sdkn, dpos_ptr, sdpn, b, offs_n, mask,
                    col, offs_d, HAS_POS: tl.constexpr):
    tl.store(dk_ptr + b * sdkb + offs_n[:, None] * sdkn + col +
             offs_d[None, :], da.to(dk_ptr.dtype.element_ty), mask=mask)
    if HAS_POS:  # the table is shared by the images: summed (fp32)
        tl.atomic_add(dpos_ptr + offs_n[:, None] * sdpn + col +
                      offs_d[None, :], da, mask=mask)
