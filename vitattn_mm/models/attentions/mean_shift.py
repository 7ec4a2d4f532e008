"""Mean-shift feature (MSF) attention and its grouped projections.

Kobayashi, "Mean-Shift Feature Transformer", CVPR 2024 (paper and code:
https://github.com/tk1980/MSFtransformer).
"""
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...ops import (check_backend, key_norm_logits,
                    mean_shift_attention_eager, mean_shift_attention_op,
                    split_parts, uses_fused_op)
from ...registry import ATTENTIONS
from ..layers.common import to_2tuple_int
from ..layers.windows import RelativePositionBias
from .base import AttentionOutput, Grid, QueryAttention, TokenAttention
from .functional import check_heads, softmax_query


class GroupedLinear(nn.Linear):
    """A linear projection whose input and output channels form G groups.

    Group g maps input channels ``[g*D/G, (g+1)*D/G)`` to E/G outputs with
    its own ``(E/G, D/G)`` block of ``weight`` (shape ``(E, D/G)``, the
    groups' blocks stacked along the rows as in the official code), so the
    layer holds 1/G of a dense layer's weights (paper Sec. 2.3). The outputs
    are laid out by ``mode``:

    * ``'interleave'`` (the paper's): output channel ``e*G + g`` comes from
      group g, i.e. the grouped projection followed by a channel shuffle.
      Any run of consecutive channels (a head) mixes every group, so each
      head passes gradient to every input channel.
    * ``'block'``: group g fills channels ``[g*E/G, (g+1)*E/G)``, so a head
      sees one group only (the ablation of paper Table 4).

    With ``groups=1`` it is ``nn.Linear``. The bias, if any, is added in the
    output order.

    Args:
        in_features (int): Input channels D.
        out_features (int): Output channels E.
        bias (bool): Learn an additive bias. Default: True.
        groups (int): Number of groups G; divides D and E. Default: 1.
        mode (str): 'interleave' or 'block'. Default: 'interleave'.
    """

    def __init__(self,
                 in_features: int,
                 out_features: int,
                 bias: bool = True,
                 groups: int = 1,
                 mode: str = 'interleave'):
        if in_features % groups or out_features % groups:
            raise ValueError(f'groups={groups} must divide in_features='
                             f'{in_features} and out_features={out_features}')
        if mode not in ('interleave', 'block'):
            raise ValueError(f"mode must be 'interleave' or 'block', got "
                             f'{mode!r}')
        # nn.Linear's in_features is the width of one group's input.
        super().__init__(in_features // groups, out_features, bias)
        self.groups = groups
        self.mode = mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.groups == 1:
            return F.linear(x, self.weight, self.bias)
        outs = [
            F.linear(x_g, w_g) for x_g, w_g in zip(
                x.chunk(self.groups, dim=-1),
                self.weight.chunk(self.groups, dim=0))
        ]
        if self.mode == 'interleave':
            out = torch.stack(outs, dim=-1).flatten(-2)
        else:
            out = torch.cat(outs, dim=-1)
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return (f'in_features={self.in_features * self.groups}, '
                f'out_features={self.out_features}, '
                f'bias={self.bias is not None}, groups={self.groups}, '
                f'mode={self.mode!r}')


@ATTENTIONS.register_module()
class MeanShiftAttention(TokenAttention):
    """Mean-shift feature (MSF) attention (paper Eq. 12), or plain softmax
    attention with the same layout.

    Per head, with d channels and scale ``d^-1/2``::

        out_h = softmax((q k^T - ||k||^2 / 2) d^-1/2 + B) v - p

    and ``proj`` (W) maps the concatenated heads back. The logits are the
    Gaussian kernel ``-||q - k||^2 / 2 d^-1/2``: its ``||q||^2`` term is the
    same for every key of a query and cancels in the softmax. ``p`` is the
    probe, the subspace position the attention-weighted mean is shifted
    from. q, k, v and p come from one projection ``qkv`` (``4C`` outputs,
    optionally G-grouped, see :class:`GroupedLinear`). With
    ``mean_shift=False`` the logits are ``q k^T d^-1/2`` and there is no
    probe (``qkv`` has ``3C`` outputs): the paper's "Orig." baselines.

    ``B`` is Swin's learned relative position bias plus the shift mask when
    the module runs in Swin's windows (``window_size``, given by
    :class:`~vitattn_mm.models.attentions.WindowedAttention`). Without it the
    attention is global (the grid is not needed; a class token may come
    first).

    ``fused=True`` runs ``F.scaled_dot_product_attention`` with the key-norm
    term folded into the additive bias (a ``(B, H, 1, N)`` broadcast for
    global attention); ``fused=False`` writes the same computation as
    matmul, softmax, matmul. Both give the same result (see
    :func:`~vitattn_mm.models.attentions.functional.softmax_attention`).

    Without a window the attention is global and takes a class token
    (:meth:`supports`).

    Args:
        embed_dims (int): Channels C (= heads x head channels).
        num_heads (int): Attention heads.
        window_size (tuple[int, int], optional): The window it runs in
            (adds the relative position bias). Default: None.
        mean_shift (bool): MSF attention; False for softmax attention.
            Default: True.
        groups (int): Groups of the ``qkv`` projection. Default: 1.
        group_mode (str): 'interleave' (the paper's) or 'block'.
            Default: 'interleave'.
        qkv_bias (bool): Bias in ``qkv``. Default: True.
        proj_bias (bool): Bias in ``proj``. Default: True.
        fused (bool): Use scaled_dot_product_attention. Default: True.
        attn_drop (float): Dropout of the attention weights. Default: 0.
        proj_drop (float): Dropout after ``proj``. Default: 0.
        attn_backend (str): 'auto', 'eager' or 'triton': the eager
            composition or the fused op (:mod:`vitattn_mm.ops`; the same
            weights and outputs). The op takes no attention dropout: a
            training step with ``attn_drop > 0`` runs eagerly. Default:
            'auto'.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """

    takes_mask = True
    grid_free = True

    @classmethod
    def refusal(cls, capability: str,
                cfg: Optional[dict] = None) -> Optional[str]:
        if capability == 'grid_free' and (cfg or {}).get('window_size'):
            return ('MeanShiftAttention in a window takes no class token '
                    '(its relative position bias needs the grid)')
        return super().refusal(capability, cfg)

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 window_size: Optional[Grid] = None,
                 mean_shift: bool = True,
                 groups: int = 1,
                 group_mode: str = 'interleave',
                 qkv_bias: bool = True,
                 proj_bias: bool = True,
                 fused: bool = True,
                 attn_drop: float = 0.,
                 proj_drop: float = 0.,
                 attn_backend: str = 'auto',
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        self.head_dims = check_heads(embed_dims, num_heads)
        self.attn_backend = check_backend(attn_backend)
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.scale = self.head_dims**-0.5
        self.mean_shift = mean_shift
        self.fused = fused
        # q, k, v (and the probe p): one projection, chunked in this order.
        self.num_parts = 4 if mean_shift else 3
        self.qkv = GroupedLinear(
            embed_dims,
            self.num_parts * embed_dims,
            bias=qkv_bias,
            groups=groups,
            mode=group_mode)
        self.proj = nn.Linear(embed_dims, embed_dims, bias=proj_bias)
        self.attn_drop = attn_drop
        self.proj_drop = nn.Dropout(proj_drop)
        self.relative_position_bias = None if window_size is None else \
            RelativePositionBias(to_2tuple_int(window_size), num_heads)

    def forward(self,
                x: torch.Tensor,
                hw_shape: Optional[Grid] = None,
                state=None,
                mask: Optional[torch.Tensor] = None) -> AttentionOutput:
        """``(B, N, C)`` tokens (windows or whole maps) -> same shape.

        ``hw_shape`` is not needed; ``mask`` is Swin's ``(num_windows, N,
        N)`` shift mask.
        """
        bias = None if self.relative_position_bias is None else \
            self.relative_position_bias()
        dropout = self.attn_drop if self.training else 0.
        qkv = self.qkv(x)
        # The op takes no attention dropout and an additive mask only.
        fusable = self.fused and not dropout and (
            mask is None or mask.is_floating_point())
        if fusable and uses_fused_op(self.attn_backend, x.device, qkv.dtype):
            out = mean_shift_attention_op(qkv, bias, mask, self.num_heads,
                                          self.scale, self.mean_shift)
        else:
            out = mean_shift_attention_eager(qkv, bias, mask, self.num_heads,
                                             self.scale, self.mean_shift,
                                             dropout, self.fused)
        return self.proj_drop(self.proj(out)), state

    @torch.no_grad()
    def query_attention(self, x: torch.Tensor, hw_shape: Grid,
                        index: int) -> QueryAttention:
        """The softmax weights of query ``index`` (Gaussian kernel, or dot
        product with ``mean_shift=False``) over the whole map."""
        q, k, *_ = split_parts(self.qkv(x[:1].float()), self.num_heads,
                               self.num_parts)
        q, k = q[0], k[0]  # the first image
        bias = key_norm_logits(k, self.scale)[:, 0] if self.mean_shift \
            else k.new_zeros(k.shape[:2])
        if self.relative_position_bias is not None:
            bias = bias + self.relative_position_bias()[:, index]
        return softmax_query(q, k, index, hw_shape, self.scale, bias)

    def extra_repr(self) -> str:
        return (f'embed_dims={self.embed_dims}, num_heads={self.num_heads}, '
                f'mean_shift={self.mean_shift}, fused={self.fused}')
