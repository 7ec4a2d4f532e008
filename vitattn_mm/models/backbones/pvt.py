"""One PVT / PVTv2 skeleton for every attention, and PVT's spatial-reduction
attention.

:class:`AttnPVT` and :class:`AttnPVTv2` are mmdet's
``PyramidVisionTransformer`` and ``PyramidVisionTransformerV2`` (same
keywords and defaults, same results; their state dicts load) whose
attention is chosen per stage or per block: by default PVT's
:class:`SpatialReductionAttention`, or any registered attention.
"""
import math
import re
from collections import OrderedDict
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import build_norm_layer
from mmdet.models.layers import nchw_to_nlc, nlc_to_nchw
from mmengine.model import ModuleList

from ...registry import ATTENTIONS, register_model
from ..layers import (QueryAttention, ResizablePosEmbed, Stage, StagedBackbone,
                      StateDict, TokenAttention, TransformerBlock,
                      attention_class, build_attention, check_heads,
                      check_type, init_linear_and_norm, linear_drop_path_rates,
                      merge_heads, migrate_conv1x1_ffn, padded_size, pass_on,
                      resolve_attn_cfgs, softmax_attention, split_heads,
                      to_2tuple_int, window_mask_bias)
from ..layers.padding import CornerPatchEmbed


class SpatialReduction(TokenAttention):
    """What PVT-style attentions share: keys and / or values from the map
    reduced by a strided ``sr_ratio`` conv (``sr``) and a norm (``norm``),
    and the output projection ``proj``.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads.
        sr_ratio (int): Spatial reduction. Default: 1.
        sr_padding (int | str): 0: the reduction drops a partial patch at
            the bottom / right (PVT, mmdet); 'corner': it pads one (the
            reduced grid is ``ceil(H / sr) x ceil(W / sr)``, as LaViT
            needs). Default: 0.
        norm_cfg (dict): Norm after the reduction. Default:
            ``dict(type='LN')``.
        proj_drop (float): Dropout after ``proj``. Default: 0.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 sr_ratio: int = 1,
                 sr_padding: Union[int, str] = 0,
                 norm_cfg: dict = dict(type='LN'),
                 proj_drop: float = 0.,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        self.head_dims = check_heads(embed_dims, num_heads)
        if sr_padding not in (0, 'corner'):
            raise ValueError(f"sr_padding must be 0 or 'corner', got "
                             f'{sr_padding!r}')
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.sr_ratio = sr_ratio
        self.sr_padding = sr_padding
        self.grid_free = sr_ratio == 1
        if sr_ratio > 1:
            self.sr = nn.Conv2d(embed_dims, embed_dims, sr_ratio, sr_ratio)
            self.norm = build_norm_layer(norm_cfg, embed_dims)[1]
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)

    def reduce(self, x: torch.Tensor, hw_shape: Tuple[int, int]):
        """The tokens keys / values come from, and their grid."""
        if self.sr_ratio == 1:
            return x, tuple(hw_shape)
        x = nlc_to_nchw(x, hw_shape)
        if self.sr_padding == 'corner':
            H, W = x.shape[-2:]
            x = F.pad(x, (0, padded_size(W, self.sr_ratio) - W, 0,
                          padded_size(H, self.sr_ratio) - H))
        x = self.sr(x)
        return self.norm(nchw_to_nlc(x)), tuple(x.shape[-2:])

    def output(self, out: torch.Tensor) -> torch.Tensor:
        """Merge the heads of ``(B, heads, N, d)``, project."""
        return self.proj_drop(self.proj(merge_heads(out)))

    def extra_repr(self) -> str:
        return (f'embed_dims={self.embed_dims}, num_heads={self.num_heads}, '
                f'sr_ratio={self.sr_ratio}')


@ATTENTIONS.register_module()
class SpatialReductionAttention(SpatialReduction):
    """PVT's attention: softmax attention whose keys and values come from
    the map reduced by a strided ``sr_ratio`` conv and a norm.

    The parameters of the official PVT and of mmdet's (``q``, ``kv``,
    ``proj``, ``sr``, ``norm``; mmdet's fused ``attn.in_proj`` /
    ``out_proj`` load through :meth:`migrate_keys`), and mmdet's result.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads.
        sr_ratio (int): Spatial reduction of keys and values. Default: 1.
        qkv_bias (bool): Bias in ``q`` and ``kv``. Default: True.
        qk_scale (float, optional): Overrides ``head_dims ** -0.5``.
            Default: None.
        attn_drop (float): Dropout of the attention weights. Default: 0.
        **kwargs: :class:`SpatialReduction` arguments (``sr_padding``,
            ``norm_cfg``, ``proj_drop``).
    """
    takes_mask = True

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 sr_ratio: int = 1,
                 qkv_bias: bool = True,
                 qk_scale: Optional[float] = None,
                 attn_drop: float = 0.,
                 **kwargs):
        super().__init__(embed_dims, num_heads, sr_ratio, **kwargs)
        self.scale = qk_scale or self.head_dims**-0.5
        self.q = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
        self.kv = nn.Linear(embed_dims, embed_dims * 2, bias=qkv_bias)
        self.attn_drop = attn_drop

    def project(self, x: torch.Tensor, hw_shape: Tuple[int, int]):
        """Heads of q, k, v and the key grid."""
        kv_tokens, kv_hw = self.reduce(x, hw_shape)
        k, v = self.kv(kv_tokens).chunk(2, dim=-1)
        return (split_heads(self.q(x), self.num_heads),
                split_heads(k, self.num_heads),
                split_heads(v, self.num_heads), kv_hw)

    def forward(self,
                x: torch.Tensor,
                hw_shape: Tuple[int, int],
                mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``(B, H*W, C)`` tokens -> same shape; ``mask``: Swin's shift mask
        (in windows, ``sr_ratio=1`` only)."""
        q, k, v, _ = self.project(x, hw_shape)
        bias, q, k, v = window_mask_bias(mask, None, q, k, v)
        out = softmax_attention(
            q, k, v, bias, self.scale,
            dropout_p=self.attn_drop if self.training else 0.)
        return self.output(out.flatten(0, 1) if mask is not None else out)

    @torch.no_grad()
    def query_attention(self, x: torch.Tensor, hw_shape: Tuple[int, int],
                        index: int) -> QueryAttention:
        """Softmax weights of query ``index`` over the reduced keys."""
        q, k, _, kv_hw = (t[0] if torch.is_tensor(t) else t
                          for t in self.project(x[:1], hw_shape))
        logits = (q[:, index:index + 1] * self.scale) @ k.transpose(-2, -1)
        return QueryAttention(logits[:, 0].softmax(-1), kv_hw, q[:, index],
                              k, self.scale)

    def migrate_keys(self, state_dict: dict, prefix: str = '') -> None:
        """mmdet's fused projections (``attn.in_proj_*``, ``attn.out_proj``)
        -> ``q``, ``kv``, ``proj``."""
        for part in ('weight', 'bias'):
            fused = state_dict.pop(f'{prefix}attn.in_proj_{part}', None)
            if fused is not None:
                q, kv = fused.split([self.embed_dims, 2 * self.embed_dims])
                state_dict[f'{prefix}q.{part}'] = q
                state_dict[f'{prefix}kv.{part}'] = kv
            out = state_dict.pop(f'{prefix}attn.out_proj.{part}', None)
            if out is not None:
                state_dict[f'{prefix}proj.{part}'] = out


#: Heads and MLP ratios shared by every PVT / PVTv2 variant; widths of all
#: but PVTv2-b0.
PVT_HEADS = dict(num_heads=[1, 2, 5, 8], mlp_ratios=[8, 8, 4, 4])
PVT_WIDTHS = dict(embed_dims=[64, 128, 320, 512], **PVT_HEADS)


@register_model
class AttnPVT(StagedBackbone):
    """Pyramid Vision Transformer whose attention is chosen per stage or
    block.

    mmdet's ``PyramidVisionTransformer``: its keywords (``embed_dims`` as
    its base width, multiplied by each stage's heads, ``num_layers``,
    ``patch_sizes``, ``paddings``, ``sr_ratios`` ...), its defaults
    (PVT-Small with its spatial-reduction attention) and its results.
    Each stage: a patch embedding, a learned position embedding resized to
    the running grid, the blocks, and (``norm_after_stage``) a norm closing
    the stage (``stages.{i}.norm``). Added: any attention (``attn_cfgs``),
    output norms ``norm{i}`` (``out_norm``), ``frozen_stages``,
    ``norm_eval`` and ``with_cp``.

    Args:
        arch (str | dict): 'tiny', 'small', 'medium', 'large' (or 't', 's',
            'm', 'l'), or a dict with ``embed_dims`` (one per stage),
            ``depths``, ``num_heads`` and ``mlp_ratios``. mmdet's keywords
            below override it. Default: 'small'.
        attn_cfgs (dict | list, optional): The attention of every stage (a
            dict), of each stage (a list; None is PVT's) or of each block
            (a list in the list); the skeleton adds ``embed_dims``,
            ``num_heads``, ``qkv_bias``, the stage's pretraining grid
            ``grid_size`` and ``sr_ratio`` to the attentions that take them
            (a ``sr_ratio > 1`` one cannot take raises). Default: None.
        pretrain_img_size (int | tuple[int, int]): Sizes the position
            embeddings. Default: 224.
        in_channels (int): Input channels. Default: 3.
        embed_dims (int | Sequence[int], optional): mmdet's base width
            (stage ``i`` has ``embed_dims * num_heads[i]`` channels), or one
            width per stage. Default: None (the arch's).
        num_stages (int): mmdet's; must match the arch. Default: 4.
        num_layers (Sequence[int], optional): Blocks per stage (mmdet's
            name for ``depths``). Default: None.
        num_heads (Sequence[int], optional): Heads per stage. Default: None.
        patch_sizes (Sequence[int]): Patch embedding kernels.
            Default: (4, 2, 2, 2).
        strides (Sequence[int]): Patch embedding strides.
            Default: (4, 2, 2, 2).
        paddings (Sequence[int | str]): Patch embedding paddings; 0 drops
            partial patches (mmdet), 'corner' pads them. Default: (0, 0, 0,
            0).
        sr_ratios (Sequence[int]): Spatial reduction per stage.
            Default: (8, 4, 2, 1).
        out_indices (Sequence[int] | int): Output stages.
            Default: (0, 1, 2, 3).
        mlp_ratios (Sequence[float], optional): FFN ratio per stage.
            Default: None (the arch's).
        qkv_bias (bool): Default: True.
        drop_rate (float): Dropout after the position embeddings, in the
            attention projection and the FFN. Default: 0.
        attn_drop_rate (float): Dropout of the attention weights.
            Default: 0.
        drop_path_rate (float): Stochastic depth rate. Default: 0.1.
        use_abs_pos_embed (bool): Learned position embeddings. Default: True.
        norm_after_stage (bool): A norm closing every stage. Default: False.
        use_conv_ffn (bool): A 3x3 depthwise conv in every FFN.
            Default: False.
        act_cfg (dict): FFN activation. Default: ``dict(type='GELU')``.
        norm_cfg (dict): Norm layers. Default: ``dict(type='LN', eps=1e-6)``.
        patch_norm_cfg (dict, optional): Norm of the patch embeddings.
            Default: None (``norm_cfg``, as mmdet).
        out_norm (bool): A norm on every output (``norm{i}``).
            Default: False.
        convert_weights (bool): mmdet's switch for official PVT files;
            accepted, official layouts are always converted. Default: True.
        **kwargs: :class:`StagedBackbone`'s ``frozen_stages``,
            ``norm_eval``, ``with_cp``, ``pretrained`` and ``init_cfg``.
    """
    arch_zoo = {
        ('t', 'tiny'): dict(depths=[2, 2, 2, 2], **PVT_WIDTHS),
        ('s', 'small'): dict(depths=[3, 4, 6, 3], **PVT_WIDTHS),
        ('m', 'medium'): dict(depths=[3, 4, 18, 3], **PVT_WIDTHS),
        ('l', 'large'): dict(depths=[3, 8, 27, 3], **PVT_WIDTHS),
    }
    arch_keys = ('embed_dims', 'depths', 'num_heads', 'mlp_ratios')

    def __init__(self,
                 arch: Union[str, dict] = 'small',
                 attn_cfgs: Optional[Union[dict, Sequence]] = None,
                 pretrain_img_size: Union[int, Tuple[int, int]] = 224,
                 in_channels: int = 3,
                 embed_dims: Optional[Union[int, Sequence[int]]] = None,
                 num_stages: int = 4,
                 num_layers: Optional[Sequence[int]] = None,
                 num_heads: Optional[Sequence[int]] = None,
                 patch_sizes: Sequence[int] = (4, 2, 2, 2),
                 strides: Sequence[int] = (4, 2, 2, 2),
                 paddings: Sequence[Union[int, str]] = (0, 0, 0, 0),
                 sr_ratios: Sequence[int] = (8, 4, 2, 1),
                 out_indices: Union[int, Sequence[int]] = (0, 1, 2, 3),
                 mlp_ratios: Optional[Sequence[float]] = None,
                 qkv_bias: bool = True,
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0.1,
                 use_abs_pos_embed: bool = True,
                 norm_after_stage: bool = False,
                 use_conv_ffn: bool = False,
                 act_cfg: dict = dict(type='GELU'),
                 norm_cfg: dict = dict(type='LN', eps=1e-6),
                 patch_norm_cfg: Optional[dict] = None,
                 out_norm: bool = False,
                 convert_weights: bool = True,
                 **kwargs):
        arch = self.resolve_arch(arch, embed_dims, num_layers, num_heads,
                                 mlp_ratios)
        depths = arch['depths']
        if num_stages != len(depths):
            raise ValueError(f'num_stages={num_stages} but the arch has '
                             f'{len(depths)} stages')
        for name, value in (('patch_sizes', patch_sizes),
                            ('strides', strides), ('paddings', paddings),
                            ('sr_ratios', sr_ratios)):
            if len(value) != num_stages:
                raise ValueError(f'{name} needs one entry per stage '
                                 f'({num_stages}), got {tuple(value)}')
        for name, value in (('use_abs_pos_embed', use_abs_pos_embed),
                            ('norm_after_stage', norm_after_stage),
                            ('use_conv_ffn', use_conv_ffn),
                            ('out_norm', out_norm), ('qkv_bias', qkv_bias)):
            check_type(name, value, bool)
        super().__init__(num_stages, out_indices, **kwargs)
        embed_dims = arch['embed_dims']
        self.embed_dims = embed_dims
        self.num_features = list(embed_dims)
        self.norm_after_stage = norm_after_stage
        self.sr_ratios = tuple(sr_ratios)
        self.min_input_size = math.prod(strides)
        self.drop_after_pos = nn.Dropout(drop_rate)
        default = dict(type='SpatialReductionAttention', norm_cfg=norm_cfg)
        cfgs = resolve_attn_cfgs(attn_cfgs, depths, default)

        grid = to_2tuple_int(pretrain_img_size)
        rates = linear_drop_path_rates(drop_path_rate, sum(depths))
        for i, depth in enumerate(depths):
            patch_embed = CornerPatchEmbed(
                in_channels=in_channels if i == 0 else embed_dims[i - 1],
                embed_dims=embed_dims[i],
                conv_type='Conv2d',
                kernel_size=patch_sizes[i],
                stride=strides[i],
                padding=paddings[i],
                norm_cfg=patch_norm_cfg or norm_cfg)
            grid = tuple(
                (s + 2 * p - k) // strides[i] + 1 if isinstance(p, int) else
                (s + strides[i] - 1) // strides[i]
                for s, p, k in zip(grid, [paddings[i]] * 2,
                                   [patch_sizes[i]] * 2))
            blocks = ModuleList()
            for j in range(depth):
                cfg = cfgs[i][j]
                pass_on(cfg, attention_class(cfg['type']),
                        attn_drop=attn_drop_rate, proj_drop=drop_rate,
                        **(dict(sr_ratio=sr_ratios[i])
                           if sr_ratios[i] > 1 else {}))
                blocks.append(TransformerBlock(
                    embed_dims[i],
                    build_attention(
                        cfg, context=dict(grid_size=grid),
                        embed_dims=embed_dims[i],
                        num_heads=arch['num_heads'][i], qkv_bias=qkv_bias),
                    ffn_ratio=arch['mlp_ratios'][i],
                    use_conv_ffn=use_conv_ffn,
                    drop_path=rates[sum(depths[:i]) + j],
                    ffn_drop=drop_rate,
                    act_cfg=act_cfg,
                    norm_cfg=norm_cfg))
            self.stages.append(Stage(
                blocks,
                patch_embed=patch_embed,
                pos_embed=ResizablePosEmbed(embed_dims[i], grid)
                if use_abs_pos_embed else None,
                norm=build_norm_layer(norm_cfg, embed_dims[i])[1]
                if norm_after_stage else None))
        if out_norm:
            if norm_after_stage:
                raise ValueError(f'{type(self).__name__} normalises every '
                                 'stage on its main path (norm_after_stage)'
                                 '; out_norm=True would add a second norm')
            self.add_output_norms(
                embed_dims, lambda c: build_norm_layer(norm_cfg, c)[1])
        self.apply(self._init_weights)

    @classmethod
    def resolve_arch(cls, arch, embed_dims=None, num_layers=None,
                     num_heads=None, mlp_ratios=None) -> dict:
        """The arch settings, mmdet's keywords overriding ``arch``; an int
        ``embed_dims`` is mmdet's base width (times each stage's heads)."""
        settings = cls.parse_arch(arch)
        for key, value in (('depths', num_layers), ('num_heads', num_heads),
                           ('mlp_ratios', mlp_ratios)):
            if value is not None:
                settings[key] = list(value)
        if embed_dims is not None:
            settings['embed_dims'] = embed_dims
        if not isinstance(settings['embed_dims'], (list, tuple)):
            settings['embed_dims'] = [settings['embed_dims'] * h
                                      for h in settings['num_heads']]
        settings['embed_dims'] = list(settings['embed_dims'])
        cls.check_per_stage(settings)
        return settings

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        init_linear_and_norm(module)

    # ----------------------------------------------------------- weights
    @classmethod
    def convert_checkpoint(cls, state_dict: StateDict) -> StateDict:
        """See :func:`convert_official_pvt`."""
        return convert_official_pvt(state_dict)

    def migrate_keys(self, state_dict: dict, prefix: str = '') -> None:
        """mmdet's layout and our earlier versions' -> ours.

        mmdet: ``layers.{i}.0`` -> ``stages.{i}.patch_embed``,
        ``layers.{i}.1.0.pos_embed`` -> ``stages.{i}.pos_embed.weight``,
        ``layers.{i}.1.{j+1}`` (``j`` with position embeddings) ->
        ``stages.{i}.blocks.{j}``, ``layers.{i}.2`` -> ``stages.{i}.norm``
        (the attentions' fused projections are split by
        :meth:`SpatialReductionAttention.migrate_keys`). PVT-v1 output
        norms of 0.2 (``stages.{i}.norm``) -> ``norm{i}``; FFNs written as
        1x1 convs -> mmcv's Linear FFN.
        """
        p = re.escape(prefix)
        offset = int(any(
            re.match(rf'{p}layers\.\d+\.1\.0\.pos_embed$', k)
            for k in state_dict))
        for key in [k for k in state_dict if k.startswith(prefix)]:
            new = re.sub(rf'^{p}layers\.(\d+)\.0\.',
                         rf'{prefix}stages.\1.patch_embed.', key)
            new = re.sub(rf'^{p}layers\.(\d+)\.1\.0\.pos_embed$',
                         rf'{prefix}stages.\1.pos_embed.weight', new)
            new = re.sub(
                rf'^{p}layers\.(\d+)\.1\.(\d+)\.', lambda m:
                f'{prefix}stages.{m.group(1)}.blocks.'
                f'{int(m.group(2)) - offset}.', new)
            new = re.sub(rf'^{p}layers\.(\d+)\.2\.',
                         rf'{prefix}stages.\1.norm.', new)
            if not self.norm_after_stage:
                new = re.sub(rf'^{p}stages\.(\d+)\.norm\.',
                             rf'{prefix}norm\1.', new)
            if new != key:
                state_dict[new] = state_dict.pop(key)
        migrate_conv1x1_ffn(state_dict, prefix)


@register_model
class AttnPVTv2(AttnPVT):
    """PVTv2 whose attention is chosen per stage or block: mmdet's
    ``PyramidVisionTransformerV2``.

    :class:`AttnPVT` with PVTv2's layout as defaults: overlapping patch
    embeddings (7x7 stride 4, then 3x3 stride 2), a 3x3 depthwise conv in
    every FFN, no position embedding, and a norm closing every stage on the
    main path (which is also the output norm). Arguments as
    :class:`AttnPVT`; arch 'b0' ... 'b4' (mmdet's defaults are 'b2').
    """
    arch_zoo = {
        'b0': dict(embed_dims=[32, 64, 160, 256], depths=[2, 2, 2, 2],
                   **PVT_HEADS),
        'b1': dict(depths=[2, 2, 2, 2], **PVT_WIDTHS),
        'b2': dict(depths=[3, 4, 6, 3], **PVT_WIDTHS),
        'b3': dict(depths=[3, 4, 18, 3], **PVT_WIDTHS),
        'b4': dict(depths=[3, 8, 27, 3], **PVT_WIDTHS),
    }

    def __init__(self,
                 arch: Union[str, dict] = 'b2',
                 patch_sizes: Sequence[int] = (7, 3, 3, 3),
                 paddings: Sequence[Union[int, str]] = (3, 1, 1, 1),
                 use_abs_pos_embed: bool = False,
                 norm_after_stage: bool = True,
                 use_conv_ffn: bool = True,
                 **kwargs):
        super().__init__(
            arch=arch,
            patch_sizes=patch_sizes,
            paddings=paddings,
            use_abs_pos_embed=use_abs_pos_embed,
            norm_after_stage=norm_after_stage,
            use_conv_ffn=use_conv_ffn,
            **kwargs)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        init_linear_and_norm(module)
        if isinstance(module, nn.Conv2d):
            # The official PVTv2 initialisation of every conv.
            fan_out = (module.kernel_size[0] * module.kernel_size[1] *
                       module.out_channels // module.groups)
            nn.init.normal_(module.weight, 0, math.sqrt(2.0 / fan_out))
            if module.bias is not None:
                nn.init.zeros_(module.bias)


def convert_official_pvt(state_dict: StateDict,
                         convert_block=None) -> StateDict:
    """Official PVT / PVTv2 keys (whai362/PVT, FLatten-PVT) -> ours; other
    layouts pass through.

    ``patch_embed{i}`` -> ``stages.{i-1}.patch_embed`` (``proj`` ->
    ``projection``), ``pos_embed{i}`` -> ``stages.{i-1}.pos_embed.weight``
    (PVT-v1's class-token row dropped), ``block{i}.{j}`` ->
    ``stages.{i-1}.blocks.{j}`` (the MLP as mmcv's FFN, or PVTv2's as
    mmdet's MixFFN), PVTv2's ``norm{i}`` -> ``stages.{i-1}.norm``. PVT's
    final ``norm`` (applied only to the class token, which is dropped) and
    ``cls_token`` are dropped; ``head.*`` is left for the classifier.

    Args:
        state_dict (dict): The file's tensors.
        convert_block (callable, optional): ``(prefix, name, value,
            conv_ffn) -> our tensors`` for one block tensor. Default: PVT's
            (:func:`convert_pvt_block`).
    """
    if not any(re.match(r'block\d+\.', k) for k in state_dict):
        return state_dict
    convert_block = convert_block or convert_pvt_block
    conv_ffn = any('.mlp.dwconv.' in k for k in state_dict)
    converted = OrderedDict()
    for key, value in state_dict.items():
        if key.startswith('norm.') or key == 'cls_token':
            continue
        m = re.match(r'block(\d+)\.(\d+)\.(.+)', key)
        if m:
            prefix = f'stages.{int(m.group(1)) - 1}.blocks.{m.group(2)}.'
            converted.update(convert_block(prefix, m.group(3), value,
                                           conv_ffn))
            continue
        m = re.match(r'(patch_embed|pos_embed|norm)(\d+)(.*)', key)
        if m:
            part, rest = m.group(1), m.group(3)
            if part == 'patch_embed':
                rest = rest.replace('.proj.', '.projection.')
            elif part == 'pos_embed':
                rest = '.weight'
                side = math.isqrt(value.shape[1] - 1)
                if side * side == value.shape[1] - 1:  # a class-token row
                    value = value[:, 1:]
            key = f'stages.{int(m.group(2)) - 1}.{part}{rest}'
        converted[key] = value
    return converted


def convert_pvt_block(prefix: str, name: str, value: torch.Tensor,
                      conv_ffn: bool = False) -> StateDict:
    """One official PVT-block tensor -> ours (``prefix`` + our name): the
    attention keeps its names; the MLP becomes mmcv's ``FFN``
    (``ffn.layers.0.0``, ``ffn.layers.1``), or with PVTv2's depthwise conv
    (``conv_ffn``) mmdet's ``MixFFN``: 1x1 convs ``ffn.layers.{0,4}`` around
    ``ffn.layers.1``."""
    m = re.match(r'mlp\.(fc1|fc2|dwconv\.dwconv)\.(weight|bias)', name)
    if m:
        layer, param = m.group(1), m.group(2)
        if not conv_ffn:
            layer = {'fc1': '0.0', 'fc2': '1'}[layer]
            return {f'{prefix}ffn.layers.{layer}.{param}': value}
        if layer != 'dwconv.dwconv' and param == 'weight':
            value = value[:, :, None, None]
        layer = {'fc1': 0, 'dwconv.dwconv': 1, 'fc2': 4}[layer]
        return {f'{prefix}ffn.layers.{layer}.{param}': value}
    return {prefix + name: value}
