"""The depthwise convolution of a token tile (FLatten's rank restoration,
fused into the linear attention's kernels,
:mod:`.triton_linear_attention`): a ``K x K`` conv of a ``(B, C, H, W)``
map at a block of tokens, and its gradients."""
import triton
import triton.language as tl


@triton.jit
def dwc_tile(map_ptr, smb, smc, smh, smw, w_ptr, bias_ptr, b, offs_n, mask_n,
         col, offs_d, mask_d, H, W, CW, K: tl.constexpr):
    """Depthwise ``K x K`` conv (zero padding, channel ``c`` with the
    kernel ``c % CW``) of a ``(B, C, H, W)`` map at tokens ``offs_n``."""
    y, x = offs_n // W, offs_n % W
    ch = col + offs_d
    wch = ch % CW
    acc = tl.zeros([offs_n.shape[0], offs_d.shape[0]], tl.float32)
    acc += tl.load(bias_ptr + wch, mask=mask_d, other=0.).to(
        tl.float32)[None, :]
    for ky in tl.static_range(K):
        for kx in tl.static_range(K):
            yy, xx = y + (ky - K // 2), x + (kx - K // 2)
            ok = mask_n & (yy >= 0) & (yy < H) & (xx >= 0) & (xx < W)
            val = tl.load(map_ptr + b * smb + ch[None, :] * smc +
                          yy[:, None] * smh + xx[:, None] * smw,
                          mask=ok[:, None] & mask_d[None, :], other=0.)
            wt = tl.load(w_ptr + wch * (K * K) + (ky * K + kx), mask=mask_d,
                         other=0.)
            acc += val.to(tl.float32) * wt.to(tl.float32)[None, :]
    return acc


@triton.jit
def dwc_tile_backward(g, map_ptr, smb, smc, smh, smw, g_ptr, sgb, sgn, w_ptr,
                  dw_ptr, db_ptr, dmap_ptr, sdmb, sdmc, sdmh, sdmw, b,
                  offs_n, mask_n, col, offs_d, mask_d, H, W, CW,
                  K: tl.constexpr):
    """The depthwise conv's share of a block: weight and bias gradients
    (atomics) and the input map's gradient at these tokens (the transposed
    conv of ``g``)."""
    y, x = offs_n // W, offs_n % W
    ch = col + offs_d
    wch = ch % CW
    tl.atomic_add(db_ptr + wch, tl.sum(g, 0), mask=mask_d)
    dmap = tl.zeros([offs_n.shape[0], offs_d.shape[0]], tl.float32)
    for ky in tl.static_range(K):
        for kx in tl.static_range(K):
            dy, dx = ky - K // 2, kx - K // 2
            yy, xx = y + dy, x + dx
            ok = mask_n & (yy >= 0) & (yy < H) & (xx >= 0) & (xx < W)
            val = tl.load(map_ptr + b * smb + ch[None, :] * smc +
                          yy[:, None] * smh + xx[:, None] * smw,
                          mask=ok[:, None] & mask_d[None, :], other=0.)
            tl.atomic_add(dw_ptr + wch * (K * K) + (ky * K + kx),
                          tl.sum(g * val.to(tl.float32), 0), mask=mask_d)
            # Map token (y, x) feeds output (y - dy, x - dx) through this tap.
            yo, xo = y - dy, x - dx
            ok = mask_n & (yo >= 0) & (yo < H) & (xo >= 0) & (xo < W)
            go = tl.load(g_ptr + b * sgb + (yo * W + xo)[:, None] * sgn +
                         ch[None, :], mask=ok[:, None] & mask_d[None, :],
                         other=0.)
            wt = tl.load(w_ptr + wch * (K * K) + (ky * K + kx), mask=mask_d,
                         other=0.)
            dmap += go.to(tl.float32) * wt.to(tl.float32)[None, :]
    tl.store(dmap_ptr + b * sdmb + ch[None, :] * sdmc + y[:, None] * sdmh +
             x[:, None] * sdmw, dmap.to(dmap_ptr.dtype.element_ty),
             mask=mask_n[:, None] & mask_d[None, :])
