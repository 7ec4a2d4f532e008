"""The Attention Residual: a stage's last attention logits, carried into the
first VA layer of the next stage (paper Eq. 6-7)."""
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.model import BaseModule
from torch.autograd.function import once_differentiable

from ...layers.common import full_precision
from ...layers.layer_scale import LayerScale
from ...layers.padding import grid_after_stride, pad
from ...layers.size_aware import (aligned_keys, capturing,
                                  token_pointwise_conv)
from ..base import Grid
from .state import LessAttentionState


class AttentionResidual(BaseModule):
    """The previous stage's last attention logits, brought to this stage
    (paper Eq. 6-7): ``LS(Conv1x1(Norm(DWConv(A))))``.

    Keys stay on their grid (the same in every stage); each key's column of
    logits is an image on the previous stage's query grid: a depthwise 2x2
    stride-2 conv (corner-padded for odd grids, like the patch embedding)
    halves it onto this stage's query grid, GroupNorm normalises it, a 1x1
    conv maps the previous stage's heads to this stage's, and a per-head
    LayerScale weighs the result that is added to the first VA layer's
    logits. The downsampling starts as 2x2 averaging.

    No biases and no affine norm: per-head constants shift whole softmax
    rows, and a per-head scale before the 1x1 conv is redundant with it.

    Args:
        in_heads (int): Heads of the previous stage.
        out_heads (int): Heads of this stage.
        layer_scale_init (float): Initial LayerScale. Default: 0.1.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """
    #: Whether the previous stage's query grid is halved (a 2x2 conv).
    halves_queries = True

    def __init__(self,
                 in_heads: int,
                 out_heads: int,
                 layer_scale_init: float = 0.1,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        if self.halves_queries:
            self.downsample = nn.Conv2d(in_heads, in_heads, 2, stride=2,
                                        groups=in_heads, bias=False)
            nn.init.constant_(self.downsample.weight, 0.25)
        self.norm = nn.GroupNorm(1, in_heads, affine=False)
        self.head_proj = nn.Conv2d(in_heads, out_heads, 1, bias=False)
        self.layer_scale = LayerScale(
            out_heads, layer_scale_init, data_format='channels_first')

    def forward(self, state: LessAttentionState,
                dst_hw: Grid) -> torch.Tensor:
        """``(B, h_in, N_src, N_k)`` logits -> ``(B, h_out, N_dst, N_k)``.

        The maps stay in their ``(B, heads, queries, keys)`` layout (no
        per-key images are cut out of them). The downsampling is linear
        along the queries, so for logits kept as factors it halves the
        queries before their product with the keys: ``DWConv(q k^T) =
        DWConv(q) k^T``, a quarter of the map, which the previous stage's
        full map never has to exist for.
        """
        src_hw = state.query_hw
        if tuple(grid_after_stride(src_hw, 2)) != tuple(dst_hw):
            raise ValueError(f'attention residual maps a {src_hw} query grid '
                             f'to {grid_after_stride(src_hw, 2)}, not '
                             f'{tuple(dst_hw)}')
        if state.queries_factor() and state.factors[2] is None:
            q, k, _ = state.factors
            # Keys padded to aligned rows: the mask is written as the fused
            # GPU kernel reads it, not copied into padding by it.
            normed = self._normed_from_factors(
                self._halve_queries(q, src_hw), aligned_keys(k))
            mixed = token_pointwise_conv(
                normed, self.mixing_weight()[..., None, None])
            return mixed[..., :k.shape[2]]
        if state.queries_factor():
            q, k, bias = state.factors
            x = self._halve_queries(q, src_hw) @ k.transpose(-2, -1) + \
                self._halve_queries(bias, src_hw)
        else:
            x = self._halve_queries(state.scores(), src_hw)
        # GroupNorm(1, h_in) of every key's column: over heads and queries.
        var, mean = torch.var_mean(x, dim=(1, 2), unbiased=False,
                                   keepdim=True)
        rstd = torch.rsqrt(var + self.norm.eps)
        # (B, heads, queries, keys) is NCHW with the heads as channels. The
        # 1x1 conv and the LayerScale are linear in the heads and a key's
        # statistics are the same for every head, so the norm applies
        # after them, in one pass: ``conv(x) * rstd - c * mean * rstd``
        # (``c``: the mixing weights' row sums). Normalising first took two
        # passes, and the LayerScale one more, in fp32 (its fp32 weight
        # promoted a bf16 map), with their gradients.
        weight = self.mixing_weight()
        mixed = token_pointwise_conv(x, weight[..., None, None])
        shift = weight.sum(1).view(1, -1, 1, 1) * (mean * rstd)
        return torch.addcmul(-shift.to(mixed.dtype), mixed,
                             rstd.to(mixed.dtype))

    def mixing_weight(self) -> torch.Tensor:
        """``(h_out, h_in)``: the 1x1 conv's weight times the LayerScale
        (a product of two small weights, not a pass over the map)."""
        return self.head_proj.weight.flatten(1) * \
            self.layer_scale.weight[:, None]

    def _normed_from_factors(self, q: torch.Tensor,
                             k: torch.Tensor) -> torch.Tensor:
        """GroupNorm(1, h) of every key's column of ``q @ k^T`` (queries
        ``(B, h, N_q, d)``, keys ``(B, h, N_k, d)``), written by one
        product: the statistics follow from the factors
        (:func:`normalised_factors`)."""
        if capturing():
            queries, keys = normalised_factors(q, k, self.norm.eps)[:2]
        else:
            queries, keys = NormalisedFactors.apply(q, k,
                                                    self.norm.eps)[:2]
        return queries @ keys.transpose(-2, -1)

    def _halve_queries(self, x: torch.Tensor, src_hw: Grid) -> torch.Tensor:
        """The depthwise 2x2 stride-2 conv over the query grid of ``(B, h,
        N_src, D)``, corner-padded: ``(B, h, N_dst, D)``: a 3-D conv whose
        depth and height are the grid and whose width is ``D`` (one op each
        way; a product with the taps and a sum wrote a map as large as the
        input, promoted to fp32 by the taps)."""
        B, h, _, D = x.shape
        x = pad(x.reshape(B, h, *src_hw, D),
                (0, 0, 0, src_hw[1] % 2, 0, src_hw[0] % 2))
        out = F.conv3d(x, self.downsample.weight[..., None], stride=(2, 2, 1),
                       groups=h)
        return out.flatten(2, 3)


def normalised_factors(q: torch.Tensor, k: torch.Tensor, eps: float):
    """Factors of GroupNorm(1, h) of every key's column of ``q @ k^T``
    (queries ``(B, h, N_q, d)``, keys ``(B, h, N_k, d)``): ``queries @
    keys^T`` is the normalised map, written by one product.

    With ``m_h`` the mean query of head ``h`` and ``C_h`` their
    covariance, the column of key ``j`` has the per-head means ``mu_hj =
    m_h . k_hj``, the mean ``mean_j`` of those and the variance
    ``mean_h(k_hj^T C_h k_hj) + var_h(mu_hj)`` (two non-negative terms: no
    cancellation), computed in fp32 from ``N x d`` tensors; then ``(q_hn .
    k_hj - mean_j) * rstd_j = [q_hn - m_h, 1] . [rstd_j k_hj, rstd_j
    (mu_hj - mean_j)]``. The map is written once, not read for its
    statistics and rewritten, and nothing map-sized runs for their
    gradients.

    Returns:
        tuple: ``queries`` ``(B, h, N_q, d + 1)`` in ``q``'s dtype,
        ``keys`` ``(B, h, N_k, d + 1)`` in ``k``'s, and what
        :class:`NormalisedFactors` differentiates them by: the centred
        queries, the mean query, the keys, ``k_hj C_h``, ``mu - mean``,
        ``rstd`` and the fp32 keys before the cast.
    """
    with full_precision(q):
        stats = torch.promote_types(q.dtype, torch.float32)
        # (Copies where already in ``stats``: what the Function saves
        # must not be its inputs or outputs.)
        kf = k.to(stats, copy=True)
        mean_query = q.mean(2, keepdim=True, dtype=stats)  # (B, h, 1, d)
        centred = q - mean_query  # in ``stats`` by promotion
        cov = centred.transpose(-2, -1) @ centred / q.shape[2]
        head_means = kf @ mean_query.transpose(-2, -1)  # (B, h, N_k, 1)
        var_h, mean = torch.var_mean(head_means, dim=1, unbiased=False,
                                     keepdim=True)
        key_cov = kf @ cov
        spread = (key_cov * kf).sum(-1, keepdim=True).mean(1, keepdim=True)
        rstd = torch.rsqrt(spread + var_h + eps)
        offsets = head_means - mean
        keys = torch.cat([kf, offsets], dim=-1) * rstd
    queries = F.pad(centred, (0, 1), value=1.)
    return (queries.to(q.dtype), keys.to(k.dtype, copy=True), centred,
            mean_query, kf, key_cov, offsets, rstd, keys)


class NormalisedFactors(torch.autograd.Function):
    """:func:`normalised_factors` with its gradient written out: autograd
    walked back some 40 small ops of the statistics per stage transition
    (LaViT-S's projected step: 2,003 -> 1,966 ops); these are 22, each on
    ``N x d`` tensors or smaller. With ``G`` the keys' gradient (``G_a``
    its first ``d`` columns, ``g_b`` the last), ``H`` heads and ``S =
    spread + var + eps``::

        dS = -rstd^2 / 2 * sum_h,c G keys
        dmu_h = g_b rstd - mean_h(g_b rstd) + 2 / H dS (mu_h - mean)
        dk_h = G_a rstd + 2 / H dS k_h C_h + dmu_h m_h
        dm_h = dmu_h^T k_h,    dC_h = k_h^T diag(dS) k_h / H
        dc_h = dqueries_h[:d] + 2 / N c_h dC_h
        dq_h = dc_h - mean_n(dc_h) + dm_h / N

    (``C`` and ``dC`` are symmetric; the centring's gradient sums to zero
    over the heads.)
    """

    @staticmethod
    def forward(q: torch.Tensor, k: torch.Tensor, eps: float):
        return normalised_factors(q, k, eps)

    @staticmethod
    def setup_context(ctx, inputs, output):
        q, k, _ = inputs
        ctx.dtypes = q.dtype, k.dtype
        ctx.mark_non_differentiable(*output[2:])
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(*output[2:])

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_queries, grad_keys, *_):
        centred, mean_query, kf, key_cov, offsets, rstd, keys = \
            ctx.saved_tensors
        B, heads, N, d = centred.shape
        with full_precision(centred):
            dq_centred = torch.zeros_like(centred) if grad_queries is None \
                else grad_queries[..., :d].to(centred.dtype)
            dk = d_mean_query = None
            if grad_keys is not None:
                g = grad_keys.to(keys.dtype)
                d_var = (g * keys).sum((1, 3), keepdim=True) * \
                    (rstd * rstd * -0.5)
                d_offsets = g[..., d:] * rstd
                d_means = torch.addcmul(
                    d_offsets - d_offsets.mean(1, keepdim=True), d_var,
                    offsets, value=2 / heads)
                dk = torch.addcmul(g[..., :d] * rstd, key_cov, d_var,
                                   value=2 / heads)
                dk = torch.addcmul(dk, d_means, mean_query)
                d_mean_query = d_means.transpose(-2, -1) @ kf
                d_cov = (kf * d_var).transpose(-2, -1) @ kf
                dq_centred = torch.baddbmm(
                    dq_centred.flatten(0, 1), centred.flatten(0, 1),
                    d_cov.flatten(0, 1),
                    alpha=2 / (N * heads)).view(B, heads, N, d)
            shift = dq_centred.mean(2, keepdim=True)
            if d_mean_query is not None:
                shift = torch.sub(shift, d_mean_query, alpha=1 / N)
            dq = torch.sub(dq_centred, shift, out=centred.new_empty(
                centred.shape, dtype=ctx.dtypes[0]))
        return dq, None if dk is None else dk.to(ctx.dtypes[1]), None


class WindowAttentionResidual(AttentionResidual):
    """The Attention Residual between Swin stages.

    Swin's windows keep their size, not their tokens: a window of the next
    stage covers 2x2 windows of this one, with the 7-token sides straddling
    them, so most of its token pairs were never scored. What carries over is
    the pattern within a window: the previous stage's last logits averaged
    over an image's windows ``(B, h_in, N, N)``, normalised, mapped to this
    stage's heads by a 1x1 conv and weighed by a per-head LayerScale; the
    first VA layer adds it to every window (an input-dependent analogue of
    the relative position bias).

    Args:
        in_heads (int): Heads of the previous stage.
        out_heads (int): Heads of this stage.
        layer_scale_init (float): Initial LayerScale. Default: 0.1.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """
    halves_queries = False  # the window keeps its size between stages

    def forward(self, state: LessAttentionState,
                dst_hw: Grid) -> torch.Tensor:
        """``(B*nW_src, h_in, N, N)`` -> ``(B, h_out, N, N)``."""
        logits = state.scores()
        _, h, N, _ = logits.shape
        x = logits.view(-1, state.windows, h, N, N).mean(dim=1)
        return token_pointwise_conv(self.norm(x),
                                    self.mixing_weight()[..., None, None])


def build_attention_residual(cfg: dict, num_heads: int,
                             window_size: Optional[Grid]) -> nn.Module:
    """``dict(type='conv' | 'window', in_heads=..., layer_scale_init=...)``
    -> :class:`AttentionResidual` / :class:`WindowAttentionResidual` into
    ``num_heads`` heads."""
    cfg = dict(cfg)
    kind = cfg.pop('type', 'window' if window_size else 'conv')
    if kind == 'conv':
        return AttentionResidual(out_heads=num_heads, **cfg)
    if kind == 'window':
        return WindowAttentionResidual(out_heads=num_heads, **cfg)
    raise ValueError("the attention residual is 'conv' or 'window', got "
                     f'{kind!r}')
