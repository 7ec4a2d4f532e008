"""Mean-Shift Feature transformer: MSF attention in Swin and in simple ViTs.

Kobayashi, "Mean-Shift Feature Transformer", CVPR 2024 (paper and code:
https://github.com/tk1980/MSFtransformer).
The official repository (tk1980/MSFtransformer) holds one SimpleViT-S
classifier. :class:`MSFViT` follows it exactly (its checkpoints load through
:meth:`MSFViT.convert_checkpoint`) and adds what dense prediction needs: any
input size and multi-level NCHW outputs (SETR). :class:`MSFSwinTransformer`
puts the same attention into Swin's shifted windows (paper Table 6), with
Swin's relative position bias and shift mask. ``mean_shift=False`` turns
either backbone into the paper's softmax baseline with the same layout.
"""
import re
from collections import OrderedDict
from typing import Optional, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...registry import ATTENTIONS, register_model
from ..layers import (QueryAttention, RelativePositionBias, StateDict,
                      TokenAttention, check_heads, merge_heads,
                      softmax_attention, to_2tuple_int, window_mask_bias)
from .swin import AttnSwinTransformer
from .vit import NO_CLS_TOKEN_SCOPE_DEFAULTS, AttnViT


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
    :class:`~vitattn_mm.models.layers.WindowedAttention`). Without it the
    attention is global (the grid is not needed; a class token may come
    first).

    ``fused=True`` runs ``F.scaled_dot_product_attention`` with the key-norm
    term folded into the additive bias (a ``(B, H, 1, N)`` broadcast for
    global attention); ``fused=False`` writes the same computation as
    matmul, softmax, matmul. Both give the same result (see
    :func:`~vitattn_mm.models.layers.softmax_attention`).

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
        init_cfg (dict, optional): Initialisation config. Default: None.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 window_size: Optional[Tuple[int, int]] = None,
                 mean_shift: bool = True,
                 groups: int = 1,
                 group_mode: str = 'interleave',
                 qkv_bias: bool = True,
                 proj_bias: bool = True,
                 fused: bool = True,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        self.head_dims = check_heads(embed_dims, num_heads)
        self.takes_mask = True
        self.grid_free = window_size is None
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
        self.relative_position_bias = None if window_size is None else \
            RelativePositionBias(to_2tuple_int(window_size), num_heads)

    def forward(self,
                x: torch.Tensor,
                hw_shape: Optional[Tuple[int, int]] = None,
                mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``(B, N, C)`` tokens (windows or whole maps) -> same shape.

        ``hw_shape`` is not needed; ``mask`` is Swin's ``(num_windows, N,
        N)`` shift mask.
        """
        B, N, C = x.shape
        parts = self._split(x)
        q, k, v = parts[0], parts[1], parts[2]
        bias = None
        if self.relative_position_bias is not None:
            bias = self.relative_position_bias()
        bias, q, k, v = window_mask_bias(mask, bias, q, k, v)
        bias = self._logit_bias(k, bias)
        out = softmax_attention(q, k, v, bias, self.scale, fused=self.fused)
        if mask is not None:
            out = out.flatten(0, 1)
        if self.mean_shift:
            out = out - parts[3]
        return self.proj(merge_heads(out))

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        """q, k, v (and p) of ``(B, N, C)`` tokens: ``(parts, B, heads, N,
        d)``."""
        B, N, _ = x.shape
        return self.qkv(x).view(B, N, self.num_parts, self.num_heads,
                                self.head_dims).permute(2, 0, 3, 1, 4)

    def _logit_bias(self, k: torch.Tensor,
                    bias: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        """Adds MSF's key-norm term ``-||k||^2 / 2 d^-1/2`` to ``bias``."""
        if not self.mean_shift:
            return bias
        key_bias = k.pow(2).sum(-1).unsqueeze(-2) * (-0.5 * self.scale)
        return key_bias if bias is None else bias + key_bias

    @torch.no_grad()
    def query_attention(self, x: torch.Tensor, hw_shape: Tuple[int, int],
                        index: int) -> QueryAttention:
        """The softmax weights of query ``index`` (Gaussian kernel, or dot
        product with ``mean_shift=False``) over the whole map."""
        parts = self._split(x[:1].float())
        q, k = parts[0][0], parts[1][0]
        logits = (q[:, index:index + 1] * self.scale) @ k.transpose(-2, -1)
        bias = self._logit_bias(k, None)
        if bias is not None:
            logits = logits + bias
        if self.relative_position_bias is not None:
            logits = logits + self.relative_position_bias()[:, index:index +
                                                            1]
        return QueryAttention(logits[:, 0].softmax(-1), tuple(hw_shape),
                              q[:, index], k, self.scale)

    def extra_repr(self) -> str:
        return (f'embed_dims={self.embed_dims}, num_heads={self.num_heads}, '
                f'mean_shift={self.mean_shift}, fused={self.fused}')


@register_model
class MSFSwinTransformer(AttnSwinTransformer):
    """Swin Transformer with MSF attention in every window (paper Table 6).

    :class:`AttnSwinTransformer` with :class:`MeanShiftAttention` as the
    window attention of every stage (inside mmpretrain's
    ``ShiftWindowMSA``, with Swin's relative position bias and shift mask).
    ``mean_shift=False`` gives Swin itself (the paper's "Orig." rows);
    ``groups=2`` the "MSF w/ 2-group" rows.

    Args:
        arch (str | dict): 'tiny' or 'small' (or 't', 's'), or a dict with
            ``embed_dims`` (int), ``depths`` and ``num_heads`` (one per
            stage). Default: 'tiny'.
        mean_shift (bool): MSF attention; False for Swin's softmax
            attention. Default: True.
        groups (int): Groups of the q/k/v/p projection. Default: 1.
        group_mode (str): 'interleave' (the paper's) or 'block'.
            Default: 'interleave'.
        fused (bool): Fused attention kernel. Default: True.
        **kwargs: :class:`AttnSwinTransformer` arguments (``window_size``,
            ``mlp_ratio``, ``qkv_bias``, ``drop_path_rate``,
            ``out_indices``, ``pad_small_map``, ``with_cp``,
            ``frozen_stages``, ``init_cfg``, mmdet's names...).
    """
    arch_zoo = {
        key: AttnSwinTransformer.arch_zoo[key]
        for key in (('t', 'tiny'), ('s', 'small'))
    }

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 mean_shift: bool = True,
                 groups: int = 1,
                 group_mode: str = 'interleave',
                 fused: bool = True,
                 **kwargs):
        kwargs.setdefault(
            'attn_cfgs',
            dict(type='ShiftWindowMSA',
                 window_msa='MeanShiftAttention',
                 mean_shift=mean_shift,
                 groups=groups,
                 group_mode=group_mode,
                 fused=fused))
        super().__init__(arch=arch, **kwargs)


@register_model
class MSFViT(AttnViT):
    """Simple ViT with MSF attention (paper Table 5; the official model).

    :class:`AttnViT` with Simple ViT's layout: patch-16 pixel-normalised
    embedding (:class:`PixelNormPatchEmbed`), a position embedding, ``depth``
    pre-norm blocks of global :class:`MeanShiftAttention` and an MLP, no
    class token, PyTorch's default initialisation (as the official model
    trains). ``mean_shift=False`` gives the softmax Simple ViT
    of the paper's "Orig." rows; ``groups=2`` the "w/ 2-group" rows.

    The position embedding is Simple ViT's fixed sin-cos, computed for the
    running token grid (no parameters, as in the official model), or
    ``pos_embed='learned'``: a table learned on the ``pretrain_img_size``
    grid and resized bilinearly to the running grid.

    Outputs: ``out_type='featmap'`` gives the tokens after each block of
    ``out_indices`` as ``(B, C, h, w)`` maps, each through its own
    LayerNorm (SETR's multi-level features); ``'avg_featmap'`` gives the
    mean token through that norm, ``(B, C)``, which is the official
    classifier's mean pooling and head norm.

    Args:
        arch (str | dict): 'ti', 'ss', 's', 'b' (or 'tiny', 'small',
            'base'), or a dict with ``embed_dims``, ``depth`` and
            ``num_heads``. Default: 'small'.
        mean_shift (bool): MSF attention; False for softmax attention.
            Default: True.
        groups (int): Groups of the q/k/v/p projection. Default: 1.
        group_mode (str): 'interleave' (the paper's) or 'block'.
            Default: 'interleave'.
        qkv_bias (bool): Bias in the q/k/v/p projection and the output
            projection (the official model has none). Default: False.
        fused (bool): Fused attention kernel. Default: True.
        pos_embed (str): 'sincos' or 'learned'. Default: 'sincos'.
        **kwargs: :class:`AttnViT` arguments (``patch_size``,
            ``ffn_ratio``, ``pretrain_img_size``, ``out_indices``,
            ``out_type``, ``drop_path_rate``, ``with_cp``,
            ``frozen_stages``, ``init_cfg``...).
    """

    scope_defaults = NO_CLS_TOKEN_SCOPE_DEFAULTS

    def __init__(self,
                 arch: Union[str, dict] = 'small',
                 mean_shift: bool = True,
                 groups: int = 1,
                 group_mode: str = 'interleave',
                 qkv_bias: bool = False,
                 fused: bool = True,
                 pos_embed: str = 'sincos',
                 **kwargs):
        kwargs.setdefault(
            'attn_cfgs',
            dict(type='MeanShiftAttention',
                 mean_shift=mean_shift,
                 groups=groups,
                 group_mode=group_mode,
                 proj_bias=qkv_bias,
                 fused=fused))
        for key, value in dict(patch_embed='pixel_norm', with_cls_token=False,
                               final_norm=False, out_norm=True,
                               norm_cfg=dict(type='LN'),
                               interpolate_mode='bilinear').items():
            kwargs.setdefault(key, value)
        super().__init__(
            arch=arch, qkv_bias=qkv_bias, pos_embed=pos_embed, **kwargs)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        """PyTorch's default initialisation, as the official model trains."""

    @classmethod
    def convert_checkpoint(cls, state_dict: StateDict) -> StateDict:
        """Official SimpleViT keys -> ours; other layouts pass through.

        ``to_patch_embedding.{1,2,3}`` -> ``patch_embed.{pixel_norm,
        projection,norm}``; ``transformer.layers.{i}.0`` (attention:
        ``norm``, ``to_qkvp`` / ``to_qkv``, ``to_out``) ->
        ``stages.{i}.blocks.0.{norm1,attn.qkv,attn.proj}``;
        ``transformer.layers.{i}.1.net.{0,1,3}`` ->
        ``stages.{i}.blocks.0.{norm2,ffn.layers.0.0,ffn.layers.1}``; the
        head's norm ``linear_head.0`` (applied to the mean token) -> the
        last block's output norm;
        ``linear_head.1`` -> ``head.fc``, left for the classifier.
        """
        layer_ids = [
            int(m.group(1)) for m in (
                re.match(r'transformer\.layers\.(\d+)\.', k)
                for k in state_dict) if m
        ]
        if not layer_ids:
            return state_dict
        renames = [
            (r'to_patch_embedding\.1\.', 'patch_embed.pixel_norm.'),
            (r'to_patch_embedding\.2\.', 'patch_embed.projection.'),
            (r'to_patch_embedding\.3\.', 'patch_embed.norm.'),
            (r'transformer\.layers\.(\d+)\.0\.norm\.',
             r'stages.\1.blocks.0.norm1.'),
            (r'transformer\.layers\.(\d+)\.0\.to_qkvp?\.',
             r'stages.\1.blocks.0.attn.qkv.'),
            (r'transformer\.layers\.(\d+)\.0\.to_out\.',
             r'stages.\1.blocks.0.attn.proj.'),
            (r'transformer\.layers\.(\d+)\.1\.net\.0\.',
             r'stages.\1.blocks.0.norm2.'),
            (r'transformer\.layers\.(\d+)\.1\.net\.1\.',
             r'stages.\1.blocks.0.ffn.layers.0.0.'),
            (r'transformer\.layers\.(\d+)\.1\.net\.3\.',
             r'stages.\1.blocks.0.ffn.layers.1.'),
            (r'linear_head\.0\.', f'norm{max(layer_ids)}.'),
            (r'linear_head\.1\.', 'head.fc.'),
        ]
        converted = OrderedDict()
        for key, value in state_dict.items():
            for pattern, replacement in renames:
                new_key, found = re.subn('^' + pattern, replacement, key)
                if found:
                    key = new_key
                    break
            converted[key] = value
        return converted
