"""What the flash-style kernels (mean-shift attention, ``softmax_apply``)
share: which rows and head a program takes, one head's tile of a
token-major tensor, and the online softmax's step."""
import triton
import triton.language as tl


@triton.jit
def program_rows(length, NH, D, BLOCK: tl.constexpr,
                 BLOCK_D: tl.constexpr):
    """This program's (image, head) pair ``bh`` (grid axis 1), the image
    ``b`` (int64) and head ``h``, its block of rows (grid axis 0) and the
    channels of a head, each with its mask."""
    bh = tl.program_id(1)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, BLOCK_D)
    return (bh, (bh // NH).to(tl.int64), bh % NH, offs, offs < length,
            offs_d, offs_d < D)


@triton.jit
def head_tile(ptr, sb, sn, b, offs, mask_n, col, offs_d, mask_d,
              UPCAST: tl.constexpr):
    """A ``[rows, BLOCK_D]`` tile of one head (channels ``col + offs_d``)
    of image ``b``, in the input's dtype (the tensor cores' bf16 / fp16
    products) or, with ``UPCAST``, in fp32 (under Triton's interpreter,
    which gets bf16 ``tl.dot`` wrong)."""
    tile = tl.load(ptr + b * sb + offs[:, None] * sn + col + offs_d[None, :],
                   mask=mask_n[:, None] & mask_d[None, :], other=0.)
    if UPCAST:
        tile = tile.to(tl.float32)
    return tile


@triton.jit
def online_softmax_step(m_i, l_i, acc, s, v):
    """One key block of the online softmax: the running row maxima ``m_i``
    and sums ``l_i`` updated with the block's fp32 logits ``s``, and the
    output accumulator ``acc`` rescaled and given ``p v``. Returns
    ``(m_i, l_i, acc)``."""
    m_i, l_i, acc, _, _ = online_softmax_weights(m_i, l_i, acc, s, v)
    return m_i, l_i, acc


@triton.jit
def online_softmax_weights(m_i, l_i, acc, s, v):
    """:func:`online_softmax_step`, and the block's weights ``p`` (against
    the new maxima) and the old sums' rescaling ``alpha``, for a caller
    that sums something more over the keys: ``(m_i, l_i, acc, p,
    alpha)``."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    p = tl.exp(s - m_new[:, None])
    alpha = tl.exp(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v,
                                        input_precision='ieee')
    return m_new, l_i, acc, p, alpha
