"""The linear attentions as custom ops: FLatten's focused linear attention
and L2ViT's ReLU linear attention.

Each op has three implementations behind one signature:

* the **eager composition** (``*_eager``): the PyTorch code the attention
  modules have always run, the reference of the tests and the CPU path;
* a **shape function** (fake tensors, the meta device): what
  ``torch.compile`` traces and the cost model records, one op each way;
* **Triton kernels** (:mod:`.triton_linear_attention`) on CUDA tensors,
  and on CPU tensors under ``TRITON_INTERPRET=1``; backward included.

Inputs are passed packed, as the projections produce them (``kv`` is
``(B, n, 2C)``, L2ViT's ``qkv`` ``(B, N, 3C)``), so the backward returns
one gradient per projection instead of one zero-filled tensor per slice.
"""
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import register_flop_formula

from ..models.layers.common import full_precision, nlc_to_nchw, split_heads
from . import focusing
from .backend import kernels_run_on
from .common import block_d, eager_grads, rows, save_with_aux, saved_inputs
from .linear_products import (joined_linear_attention,
                              merged_with_residual,
                              normalised_linear_attention,
                              relu_linear_attention)

# ------------------------------------------------------------------ eager


def focused_linear_attention_eager(
        q: torch.Tensor, kv: torch.Tensor, pos: Optional[torch.Tensor],
        s: torch.Tensor, dwc_map: Optional[torch.Tensor],
        dwc_weight: torch.Tensor, dwc_bias: torch.Tensor, hw: Sequence[int],
        num_heads: int, focusing_factor: float) -> torch.Tensor:
    """Focused linear attention plus the depthwise conv, eagerly.

    Args:
        q (Tensor): ``(B, N, C)`` queries on the ``hw`` grid.
        kv (Tensor): ``(B, n, 2C)`` keys and values.
        pos (Tensor, optional): ``(1, n, C)`` added to the keys.
        s (Tensor): ``(C,)`` (or broadcastable) fp32 divisor of the
            feature map (``softplus`` of the learned scale).
        dwc_map (Tensor, optional): ``(B, C, H, W)`` map the depthwise conv
            runs on; None: the values (then ``n == N``).
        dwc_weight (Tensor): ``(C / heads, 1, k, k)``: one kernel shared by
            the heads.
        dwc_bias (Tensor): ``(C / heads,)``.
        hw (tuple[int, int]): The query grid.
        num_heads (int): Heads.
        focusing_factor (float): p of the focusing function.

    Returns:
        Tensor: ``(B, N, C)``, the dtype of ``kv``.
    """
    B, N, C = q.shape
    k, values = kv.chunk(2, dim=-1)
    if pos is not None:
        # In the keys' dtype: an fp32 table would promote the keys, and
        # with them the queries they are joined with and every pass to
        # the focusing function's own fp32 (its first op), to fp32.
        k = k + pos.to(k.dtype)
    # The official z = 1 / (q . mean(k) + eps) and (k / sqrt(n))^T
    # (v / sqrt(n)) with the 1 / n folded into z: in fp32 nothing
    # overflows, and two scalings of whole key and value maps (and their
    # gradients) are passes saved.
    eps = k.shape[1] * 1e-6
    v = split_heads(values, num_heads)
    if dwc_map is None:
        dwc_map = nlc_to_nchw(values, hw)
    # One depthwise kernel for every head: heads go into the batch.
    heads = dwc_map.reshape(B * num_heads, C // num_heads, *hw)
    # The map's dtype, as autocast would give: inside the custom op (its
    # CPU path) autocast does not reach, and an fp32 weight on a bf16 map
    # would not convolve.
    conv = F.conv2d(heads, dwc_weight.to(heads.dtype),
                    dwc_bias.to(heads.dtype),
                    padding=dwc_weight.shape[-1] // 2,
                    groups=C // num_heads)
    # (B, heads, N, d): added to the attention's fp32 output, the sum
    # rounded once to the output's dtype.
    conv = conv.reshape(B, num_heads, C // num_heads, N).transpose(-2, -1)
    with full_precision(q):
        if focusing.joins_queries_and_keys(q):
            features = focusing.focused_joint(q, k, s, focusing_factor,
                                              num_heads)
            return joined_linear_attention(features, v, N, eps,
                                           residual=conv)
        q, k = focusing.focused_pair(q, k, s, focusing_factor,
                                     num_heads)
        out = normalised_linear_attention(q, k, v, eps)
        return merged_with_residual(out, conv, values.dtype)


def relu_linear_attention_eager(qkv: torch.Tensor,
                                temperature: torch.Tensor, num_heads: int,
                                denominator_min: float) -> torch.Tensor:
    """L2ViT's linear attention, eagerly: ``relu(q) (T relu(k)^T v) /
    max(relu(q) . sum relu(k), denominator_min)`` per head.

    Args:
        qkv (Tensor): ``(B, N, 3C)``: queries, keys and values.
        temperature (Tensor): ``(heads, 1, 1)``.
        num_heads (int): Heads.
        denominator_min (float): Floor of the normaliser.

    Returns:
        Tensor: ``(B, N, C)``, the dtype of ``qkv``.
    """
    with full_precision(qkv):
        return relu_linear_attention(qkv, temperature.float(), num_heads,
                                     denominator_min)


# ---------------------------------------------------------------- kernels


def _kernels():
    from . import triton_linear_attention
    return triton_linear_attention


def _layout(t: Optional[torch.Tensor], fallback: torch.Tensor):
    """A tensor or its stand-in (a pointer the kernel never reads)."""
    return fallback if t is None else t


def _integer_power(p: float) -> int:
    """``p`` as the kernels' unrolled integer power, 0 if it is none."""
    return int(p) if float(p).is_integer() and p >= 1 else 0


def _sums(x: torch.Tensor, num_heads: int, zeros: bool = False
          ) -> torch.Tensor:
    """A buffer for the state kernel's fp32 sums of ``(B, N, C)`` tokens
    (``S`` and ``m`` of every image and head), empty or zeroed."""
    B, _, C = x.shape
    D = C // num_heads
    make = x.new_zeros if zeros else x.new_empty
    return make(B * num_heads * D * (D + 1), dtype=torch.float32)


def _split_sums(sums: torch.Tensor, B: int, num_heads: int, D: int):
    """``S`` ``(B, heads, d, d)`` and ``m`` ``(B, heads, d)``: views of a
    :func:`_sums` buffer."""
    return (sums[:B * num_heads * D * D].view(B, num_heads, D, D),
            sums[B * num_heads * D * D:].view(B, num_heads, D))


def _launch_forward(q, k, v, pos, s, temperature, dwc_map, dwc_weight,
                    dwc_bias, hw, num_heads, p, T, A, eps, dmin, focused,
                    out_dtype):
    """Both forward kernels: the fp32 sums (returned in their buffer),
    then the output."""
    tk = _kernels()
    B, N, C = q.shape
    D = C // num_heads
    tile_d = block_d(D)
    p_int = _integer_power(p)
    n = k.shape[1]
    sums = _sums(k, num_heads, zeros=True)
    state, ksum = _split_sums(sums, B, num_heads, D)
    pos_t = _layout(pos, k)
    tk.state_kernel[(B, -(-n // tk.BLOCK_N))](
        k, k.stride(0), k.stride(1), v, v.stride(0), v.stride(1), pos_t,
        pos_t.stride(-2) if pos is not None else 0, _layout(s, k), state,
        ksum, n, D, num_heads, float(p), P_INT=p_int,
        HAS_POS=pos is not None, FOCUSED=focused, BLOCK_N=tk.BLOCK_N,
        BLOCK_D=tile_d, DOT=tk.DOT_PRECISION, num_warps=tk.NUM_WARPS)
    out = torch.empty(B, N, C, device=q.device, dtype=out_dtype)
    has_dwc = dwc_weight is not None
    cmap, strides = _conv_input(dwc_map, v, hw)
    tk.output_kernel[(B, -(-N // tk.BLOCK_N))](
        q, q.stride(0), q.stride(1), _layout(s, q), state, ksum,
        _layout(temperature, q), cmap, *strides, _layout(dwc_weight, q),
        _layout(dwc_bias, q), out, out.stride(0), out.stride(1), N, hw[0],
        hw[1], D, num_heads, dwc_weight.shape[0] if has_dwc else 1,
        float(T), float(A), float(eps), float(dmin), float(p),
        P_INT=p_int, FOCUSED=focused, PER_HEAD_T=temperature is not None,
        HAS_DWC=has_dwc, K=dwc_weight.shape[-1] if has_dwc else 1,
        BLOCK_N=tk.BLOCK_N, BLOCK_D=tile_d, DOT=tk.DOT_PRECISION,
        num_warps=tk.NUM_WARPS)
    return out, sums


def _conv_input(dwc_map, v, hw) -> Tuple[torch.Tensor, List[int]]:
    """The conv's input and its (batch, channel, row, column) strides: the
    map, or the value tokens read as a map."""
    if dwc_map is not None:
        return dwc_map, list(dwc_map.stride())
    return v, [v.stride(0), 1, hw[1] * v.stride(1), v.stride(1)]


def _launch_backward(grad, q, k, v, pos, s, temperature, dwc_map, dwc_weight,
                     dwc_bias, state, ksum, hw, num_heads, p, T, A, eps, dmin,
                     focused, dq, dk, dv):
    """Both backward kernels; writes ``dq``, ``dk``, ``dv`` and returns the
    fp32 gradients of ``s``, the conv's weight and bias and ``pos`` packed
    in one tensor (:func:`_packed_sizes`), the conv map's gradient and
    ``dS`` (for the temperature)."""
    tk = _kernels()
    B, N, C = q.shape
    n, D = k.shape[1], C // num_heads
    tile_d = block_d(D)
    p_int = _integer_power(p)
    has_dwc = dwc_weight is not None
    # Every sum the kernels' atomics add into, zeroed by one fill: the
    # parameters' gradients (returned as they lie), then dS and dm.
    sizes = _packed_sizes(C, dwc_weight, n * C if pos is not None else 0)
    packed = torch.zeros(sum(sizes) + state.numel() + ksum.numel(),
                         device=q.device, dtype=torch.float32)
    ds, dw, db, dpos, dstate, dksum = packed.split(
        [*sizes, state.numel(), ksum.numel()])
    dstate, dksum = dstate.view(state.shape), dksum.view(ksum.shape)
    if dwc_map is not None:
        dmap = torch.empty_like(dwc_map)
        dmap_strides = list(dmap.stride())
    else:  # the conv ran on the values: its gradient lands in dv first
        dmap = dv
        dmap_strides = [dv.stride(0), 1, hw[1] * dv.stride(1), dv.stride(1)]
    cmap, strides = _conv_input(dwc_map, v, hw)
    tk.query_backward_kernel[(B, -(-N // tk.BLOCK_N))](
        q, q.stride(0), q.stride(1), _layout(s, q), grad, grad.stride(0),
        grad.stride(1), state, ksum, _layout(temperature, q), dstate, dksum,
        dq, dq.stride(0), dq.stride(1), ds, cmap, *strides,
        _layout(dwc_weight, q), dw, db, dmap, *dmap_strides, N, hw[0], hw[1],
        D, num_heads, dwc_weight.shape[0] if has_dwc else 1, float(T),
        float(A), float(eps), float(dmin), float(p), P_INT=p_int,
        FOCUSED=focused, PER_HEAD_T=temperature is not None,
        HAS_DWC=has_dwc, K=dwc_weight.shape[-1] if has_dwc else 1,
        BLOCK_N=tk.BLOCK_N, BLOCK_D=tile_d, DOT=tk.DOT_PRECISION,
        num_warps=tk.NUM_WARPS)
    dpos = dpos.view(n, C) if pos is not None else ds
    pos_t = _layout(pos, k)
    tk.key_backward_kernel[(B, -(-n // tk.BLOCK_N))](
        k, k.stride(0), k.stride(1), v, v.stride(0), v.stride(1), pos_t,
        pos_t.stride(-2) if pos is not None else 0, _layout(s, k),
        _layout(temperature, k), dstate, dksum, dk, dk.stride(0),
        dk.stride(1), dv, dv.stride(0), dv.stride(1), dpos, C, ds, n, D,
        num_heads, float(T), float(A), float(p), P_INT=p_int,
        HAS_POS=pos is not None, FOCUSED=focused,
        PER_HEAD_T=temperature is not None,
        ADD_DV=has_dwc and dwc_map is None, BLOCK_N=tk.BLOCK_N,
        BLOCK_D=tile_d, DOT=tk.DOT_PRECISION, num_warps=tk.NUM_WARPS)
    return packed[:sum(sizes)], dmap, dstate


def _packed_sizes(C: int, dwc_weight: Optional[torch.Tensor],
                  pos_numel: int) -> List[int]:
    """Sizes of the packed parameter gradients: ``s`` (C), the conv's
    weight and bias (one each without a conv: placeholders) and ``pos``
    (none without a table)."""
    if dwc_weight is None:
        return [C, 1, 1, pos_numel]
    return [C, dwc_weight.numel(), dwc_weight.shape[0], pos_numel]


# ------------------------------------------------------------- custom ops

#: FLatten's constants: T = A = 1 / n, EPS; no floor.
_FLATTEN_EPS = 1e-6
_NO_CLAMP = -3.0e38


def _focused_args(q, kv, pos, s, dwc_weight):
    C = q.shape[-1]
    q, kv = rows(q), rows(kv)
    n = kv.shape[1]
    pos = None if pos is None else rows(pos.reshape(n, C))
    return (q, kv[..., :C], kv[..., C:], pos, s.reshape(-1).contiguous(),
            1. / n, dwc_weight.contiguous())


@torch.library.custom_op('vitattn::focused_linear_attention',
                         mutates_args=())
def focused_linear_attention_with_sums(
        q: torch.Tensor, kv: torch.Tensor, pos: Optional[torch.Tensor],
        s: torch.Tensor, dwc_map: Optional[torch.Tensor],
        dwc_weight: torch.Tensor, dwc_bias: torch.Tensor, hw: List[int],
        num_heads: int, focusing_factor: float) -> List[torch.Tensor]:
    """:func:`focused_linear_attention_eager` as one op (see the module
    docstring), and the state kernel's fp32 sums (not differentiable; its
    backward reads them instead of summing the keys again; zeros on the
    CPU path, whose backward differentiates the composition)."""
    if not kernels_run_on(q.device):
        return [focused_linear_attention_eager(q, kv, pos, s, dwc_map,
                                               dwc_weight, dwc_bias, hw,
                                               num_heads, focusing_factor),
                _sums(q, num_heads, zeros=True)]
    q, k, v, pos, s, inv_n, dwc_weight = _focused_args(q, kv, pos, s,
                                                      dwc_weight)
    out, sums = _launch_forward(q, k, v, pos, s, None, rows(dwc_map),
                                dwc_weight, dwc_bias, hw, num_heads,
                                focusing_factor, inv_n, inv_n, _FLATTEN_EPS,
                                _NO_CLAMP, True, kv.dtype)
    return [out, sums]


@focused_linear_attention_with_sums.register_fake
def _(q, kv, pos, s, dwc_map, dwc_weight, dwc_bias, hw, num_heads,
      focusing_factor):
    return [q.new_empty(q.shape, dtype=kv.dtype), _sums(q, num_heads)]


def focused_linear_attention_op(
        q: torch.Tensor, kv: torch.Tensor, pos: Optional[torch.Tensor],
        s: torch.Tensor, dwc_map: Optional[torch.Tensor],
        dwc_weight: torch.Tensor, dwc_bias: torch.Tensor, hw: List[int],
        num_heads: int, focusing_factor: float) -> torch.Tensor:
    """:func:`focused_linear_attention_eager` as one op
    (``vitattn::focused_linear_attention``, whose sums stay with
    autograd)."""
    return focused_linear_attention_with_sums(
        q, kv, pos, s, dwc_map, dwc_weight, dwc_bias, hw, num_heads,
        focusing_factor)[0]


@torch.library.custom_op('vitattn::focused_linear_attention_backward',
                         mutates_args=())
def focused_linear_attention_backward_op(
        grad: torch.Tensor, q: torch.Tensor, kv: torch.Tensor,
        pos: Optional[torch.Tensor], s: torch.Tensor,
        dwc_map: Optional[torch.Tensor], dwc_weight: torch.Tensor,
        dwc_bias: torch.Tensor, hw: List[int], num_heads: int,
        focusing_factor: float, sums: torch.Tensor) -> List[torch.Tensor]:
    """Gradients of ``q``, ``kv`` and ``dwc_map`` (empty if it is None),
    and those of ``s``, ``dwc_weight``, ``dwc_bias`` and ``pos`` packed in
    one fp32 tensor as the kernels' atomics summed them
    (:func:`_packed_sizes`; :func:`_focused_backward` takes it apart),
    given the forward's sums."""
    if not kernels_run_on(q.device):
        dq, dkv, dpos, ds, dmap, dw, db = eager_grads(
            focused_linear_attention_eager, grad,
            (q, kv, pos, s, dwc_map, dwc_weight, dwc_bias),
            (hw, num_heads, focusing_factor))
        return [dq, dkv, dmap, torch.cat([t.reshape(-1).float()
                                          for t in (ds, dw, db, dpos)])]
    dq = torch.empty_like(q, memory_format=torch.contiguous_format)
    dkv = torch.empty(kv.shape, device=kv.device, dtype=kv.dtype)
    C = q.shape[-1]
    q, k, v, pos_t, s_t, inv_n, w = _focused_args(q, kv, pos, s, dwc_weight)
    state, ksum = _split_sums(sums, q.shape[0], num_heads, C // num_heads)
    packed, dmap, _ = _launch_backward(
        rows(grad), q, k, v, pos_t, s_t, None, rows(dwc_map), w, dwc_bias,
        state, ksum, hw, num_heads, focusing_factor, inv_n, inv_n,
        _FLATTEN_EPS, _NO_CLAMP, True, dq, dkv[..., :C], dkv[..., C:])
    return [dq, dkv, q.new_empty(0) if dwc_map is None else dmap, packed]


@focused_linear_attention_backward_op.register_fake
def _(grad, q, kv, pos, s, dwc_map, dwc_weight, dwc_bias, hw, num_heads,
      focusing_factor, sums):
    sizes = _packed_sizes(q.shape[-1], dwc_weight,
                          0 if pos is None else pos.numel())
    return [torch.empty_like(q), torch.empty_like(kv),
            q.new_empty(0) if dwc_map is None else torch.empty_like(dwc_map),
            q.new_empty(sum(sizes), dtype=torch.float32)]


def _focused_backward(ctx, grads):
    if grads[0] is None:
        return (None, ) * 10
    q, kv, pos, s, dwc_map, w, b, hw, heads, p, sums = saved_inputs(ctx)
    dq, dkv, dmap, packed = focused_linear_attention_backward_op(
        grads[0], q, kv, pos, s, dwc_map, w, b, hw, heads, p, sums)
    ds, dw, db, dpos = packed.split(_packed_sizes(
        q.shape[-1], w, 0 if pos is None else pos.numel()))
    return (dq, dkv, None if pos is None else dpos.view(pos.shape).to(
        pos.dtype), ds.view(s.shape).to(s.dtype),
            None if dwc_map is None else dmap, dw.view(w.shape).to(w.dtype),
            db.view(b.shape).to(b.dtype), None, None, None)


focused_linear_attention_with_sums.register_autograd(
    _focused_backward, setup_context=save_with_aux)


@torch.library.custom_op('vitattn::relu_linear_attention', mutates_args=())
def relu_linear_attention_with_sums(qkv: torch.Tensor,
                                    temperature: torch.Tensor,
                                    num_heads: int, denominator_min: float
                                    ) -> List[torch.Tensor]:
    """:func:`relu_linear_attention_eager` as one op, and its fp32 sums
    (as :func:`focused_linear_attention_with_sums`)."""
    C = qkv.shape[-1] // 3
    if not kernels_run_on(qkv.device):
        return [relu_linear_attention_eager(qkv, temperature, num_heads,
                                            denominator_min),
                _sums(qkv[..., :C], num_heads, zeros=True)]
    qkv = rows(qkv)
    out, sums = _launch_forward(
        qkv[..., :C], qkv[..., C:2 * C], qkv[..., 2 * C:], None, None,
        temperature.reshape(-1).contiguous(), None, None, None, (1, 1),
        num_heads, 1., 1., 1., 0., denominator_min, False, qkv.dtype)
    return [out, sums]


@relu_linear_attention_with_sums.register_fake
def _(qkv, temperature, num_heads, denominator_min):
    B, N, C3 = qkv.shape
    return [qkv.new_empty(B, N, C3 // 3),
            _sums(qkv[..., :C3 // 3], num_heads)]


def relu_linear_attention_op(qkv: torch.Tensor, temperature: torch.Tensor,
                             num_heads: int,
                             denominator_min: float) -> torch.Tensor:
    """:func:`relu_linear_attention_eager` as one op
    (``vitattn::relu_linear_attention``, whose sums stay with autograd)."""
    return relu_linear_attention_with_sums(qkv, temperature, num_heads,
                                           denominator_min)[0]


@torch.library.custom_op('vitattn::relu_linear_attention_backward',
                         mutates_args=())
def relu_linear_attention_backward_op(
        grad: torch.Tensor, qkv: torch.Tensor, temperature: torch.Tensor,
        num_heads: int, denominator_min: float,
        sums: torch.Tensor) -> List[torch.Tensor]:
    """Gradients of ``qkv`` and ``temperature``, given the forward's
    sums."""
    if not kernels_run_on(qkv.device):
        return eager_grads(relu_linear_attention_eager, grad,
                            (qkv, temperature), (num_heads, denominator_min))
    qkv = rows(qkv)
    C = qkv.shape[-1] // 3
    q, k, v = qkv[..., :C], qkv[..., C:2 * C], qkv[..., 2 * C:]
    temp = temperature.reshape(-1).contiguous()
    state, ksum = _split_sums(sums, qkv.shape[0], num_heads, C // num_heads)
    dqkv = torch.empty(qkv.shape, device=qkv.device, dtype=qkv.dtype)
    *_, dstate = _launch_backward(
        rows(grad), q, k, v, None, None, temp, None, None, None, state,
        ksum, (1, 1), num_heads, 1., 1., 1., 0., denominator_min, False,
        dqkv[..., :C], dqkv[..., C:2 * C], dqkv[..., 2 * C:])
    # dS is w.r.t. T * S: the temperature's gradient is <dS, S>.
    dtemp = (dstate * state).sum((0, 2, 3))
    return [dqkv, dtemp.reshape(temperature.shape).to(temperature.dtype)]


@relu_linear_attention_backward_op.register_fake
def _(grad, qkv, temperature, num_heads, denominator_min, sums):
    return [torch.empty_like(qkv), torch.empty_like(temperature)]


def _relu_backward(ctx, grads):
    if grads[0] is None:
        return None, None, None, None
    qkv, temperature, heads, dmin, sums = saved_inputs(ctx)
    dqkv, dtemp = relu_linear_attention_backward_op(grads[0], qkv,
                                                    temperature, heads, dmin,
                                                    sums)
    return dqkv, dtemp, None, None


relu_linear_attention_with_sums.register_autograd(
    _relu_backward, setup_context=save_with_aux)

# ----------------------------------------------------------- FLOP counts


@register_flop_formula(torch.ops.vitattn.focused_linear_attention)
def _focused_flops(q, kv, pos, s, dwc_map, dwc_weight, *args,
                   out_shape=None, **kwargs) -> int:
    """The eager composition's matmul and conv FLOPs."""
    B, N, C = q
    n, heads = kv[1], args[-2]
    d = C // heads
    return 2 * B * C * (d * (n + N) + N) + 2 * B * N * C * dwc_weight[-1]**2


@register_flop_formula(torch.ops.vitattn.focused_linear_attention_backward)
def _focused_backward_flops(grad, q, kv, *args, out_shape=None,
                            **kwargs) -> int:
    return 2 * _focused_flops(q, kv, *args[:-1])  # the sums left out


@register_flop_formula(torch.ops.vitattn.relu_linear_attention)
def _relu_flops(qkv, temperature, num_heads, *args, out_shape=None,
                **kwargs) -> int:
    B, N, C3 = qkv
    C = C3 // 3
    return 2 * B * C * (2 * N * C // num_heads + N)


@register_flop_formula(torch.ops.vitattn.relu_linear_attention_backward)
def _relu_backward_flops(grad, qkv, *args, out_shape=None, **kwargs) -> int:
    return 2 * _relu_flops(qkv, *args)
