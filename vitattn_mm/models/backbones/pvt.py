"""One PVT / PVTv2 skeleton for every attention.

:class:`AttnPVT` and :class:`AttnPVTv2` are mmdet's
``PyramidVisionTransformer`` and ``PyramidVisionTransformerV2`` (same
keywords and defaults, same results; their state dicts load) whose
attention is chosen per stage or per block: by default PVT's
:class:`~vitattn_mm.models.attentions.SpatialReductionAttention`, or any
registered attention.
"""
import functools
import math
import re
from collections import OrderedDict
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn

from ...registry import register_model
from ..attentions.cfgs import resolve_attn_cfgs
from ..layers.blocks import TransformerBlock
from ..layers.common import check_type, to_2tuple_int
from ..layers.padding import CornerPatchEmbed
from ..layers.pos_embed import ResizablePosEmbed
from ..layers.stage import (drop_path_slices, init_linear_and_norm,
                            norm_layer)
from ..checkpoint.pretrained import StateDict
from .backbone_spec import BackboneSpec
from .base_backbone import StagedBackbone
from .input_size import grids_at, patch_grid_sides
from .stage_spec import StageSpec
from ..checkpoint.adapt import block_converter

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
    the stage (``stages.{i}.norm``); the first stage's patch embedding is
    the stem (``patch_embed``). Added: any attention (``attn_cfgs``),
    output norms ``norm{i}`` (``out_norm``), ``frozen_stages``,
    ``norm_eval`` and ``with_cp``.

    Args:
        arch (str | dict): 'tiny', 'small', 'medium', 'large' (or 't', 's',
            'm', 'l'), or a dict with ``embed_dims`` (one per stage),
            ``depths``, ``num_heads`` and ``mlp_ratios``. mmdet's keywords
            below override it. Default: 'small'.
        attn_cfgs (dict | list | callable, optional): The attention of
            every stage (a dict), of each stage (a list; None is PVT's) or of
            each block (a list in the list), or a family's plan ``plan(arch,
            grids)``; the skeleton adds ``embed_dims``,
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
        **kwargs: :class:`StagedBackbone`'s ``frozen_stages``,
            ``norm_eval``, ``with_cp``, ``convert_weights`` (mmdet's switch
            for official PVT files), ``pretrained`` and ``init_cfg``.
    """
    arch_zoo = {
        ('t', 'tiny'): dict(depths=[2, 2, 2, 2], **PVT_WIDTHS),
        ('s', 'small'): dict(depths=[3, 4, 6, 3], **PVT_WIDTHS),
        ('m', 'medium'): dict(depths=[3, 4, 18, 3], **PVT_WIDTHS),
        ('l', 'large'): dict(depths=[3, 8, 27, 3], **PVT_WIDTHS),
    }
    arch_keys = ('embed_dims', 'depths', 'num_heads', 'mlp_ratios')
    arch_aliases = {'num_layers': 'depths'}

    def __init__(self,
                 arch: Union[str, dict] = 'small',
                 attn_cfgs=None,
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
                 **kwargs):
        arch = self.resolve_arch(arch, embed_dims=embed_dims,
                                 num_layers=num_layers, num_heads=num_heads,
                                 mlp_ratios=mlp_ratios)
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
        if out_norm and norm_after_stage:
            raise ValueError(f'{type(self).__name__} normalises every stage '
                             'on its main path (norm_after_stage); '
                             'out_norm=True would add a second norm')
        super().__init__(num_stages, out_indices, **kwargs)
        embed_dims = arch['embed_dims']
        self.embed_dims = embed_dims
        self.num_features = list(embed_dims)
        self.norm_after_stage = norm_after_stage
        self.sr_ratios = tuple(sr_ratios)
        self.patch_layout = tuple(zip(patch_sizes, strides, paddings))

        grid_sides = functools.partial(patch_grid_sides, self.patch_layout)
        grids = grids_at(grid_sides, to_2tuple_int(pretrain_img_size,
                                                   'pretrain_img_size'))
        cfgs = resolve_attn_cfgs(
            attn_cfgs, arch, depths, grids,
            dict(type='SpatialReductionAttention', norm_cfg=norm_cfg))
        drop_paths = drop_path_slices(drop_path_rate, depths)
        patch_embeds = [functools.partial(
            CornerPatchEmbed,
            in_channels=in_channels if i == 0 else embed_dims[i - 1],
            embed_dims=embed_dims[i],
            conv_type='Conv2d',
            kernel_size=patch_sizes[i],
            stride=strides[i],
            padding=paddings[i],
            norm_cfg=patch_norm_cfg or norm_cfg) for i in range(num_stages)]
        stages = [StageSpec(
            embed_dims[i], arch['num_heads'][i], grids[i], cfgs[i],
            drop_paths[i], functools.partial(
                TransformerBlock, embed_dims[i],
                ffn_ratio=arch['mlp_ratios'][i],
                use_conv_ffn=use_conv_ffn, ffn_drop=drop_rate,
                act_cfg=act_cfg, norm_cfg=norm_cfg),
            qkv_bias=qkv_bias,
            # A reduction an attention cannot take raises; none is only
            # given to those that take it.
            settings=dict(attn_drop=attn_drop_rate, proj_drop=drop_rate,
                          **(dict(sr_ratio=sr_ratios[i])
                             if sr_ratios[i] > 1 else {})),
            # The first stage's patch embedding is the stem.
            patch_embed=patch_embeds[i] if i else None,
            pos_embed=functools.partial(ResizablePosEmbed, embed_dims[i],
                                        grids[i])
            if use_abs_pos_embed else None,
            norm=functools.partial(norm_layer, norm_cfg, embed_dims[i])
            if norm_after_stage else None) for i in range(num_stages)]
        self.build(BackboneSpec(
            arch, dict(patch_embed=patch_embeds[0],
                       drop_after_pos=functools.partial(nn.Dropout,
                                                        drop_rate)),
            stages, self.out_indices, grid_sides,
            output_norm=functools.partial(norm_layer, norm_cfg)
            if out_norm else None))
        self.apply(self._init_weights)

    @classmethod
    def normalize_arch(cls, settings: dict) -> dict:
        """An int ``embed_dims`` is mmdet's base width (times each stage's
        heads)."""
        if not isinstance(settings['embed_dims'], (list, tuple)):
            settings['embed_dims'] = [settings['embed_dims'] * h
                                      for h in settings['num_heads']]
        settings['embed_dims'] = list(settings['embed_dims'])
        return settings

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        init_linear_and_norm(module)

    # ----------------------------------------------------------- weights
    @staticmethod
    def convert_official_keys(state_dict: StateDict,
                              block_attention) -> StateDict:
        """See :func:`convert_official_pvt`."""
        return convert_official_pvt(state_dict, block_attention)

    def migrate_layout(self, state_dict: StateDict) -> StateDict:
        """mmdet's layout -> ours.

        ``layers.{i}.0`` -> the stage's patch embedding (the stem
        ``patch_embed`` for the first), ``layers.{i}.1.0.pos_embed`` ->
        ``stages.{i}.pos_embed.weight``, ``layers.{i}.1.{j+1}`` (``j`` with
        position embeddings) -> ``stages.{i}.blocks.{j}``, ``layers.{i}.2``
        -> ``stages.{i}.norm``; the attentions' fused projections
        (``attn.attn.in_proj_*``, ``attn.attn.out_proj``) split into ``q``,
        ``kv`` and ``proj``; PVT's FFN written as 1x1 convs
        (``ffn.layers.{0,3}``, 4-D) -> mmcv's Linear FFN.
        """
        offset = int(any(re.match(r'layers\.\d+\.1\.0\.pos_embed$', k)
                         for k in state_dict))
        conv_ffn = any('.ffn.layers.4.' in k for k in state_dict)
        migrated = OrderedDict()
        for key, value in state_dict.items():
            key = re.sub(r'^layers\.0\.0\.', 'patch_embed.', key)  # the stem
            key = re.sub(r'^layers\.(\d+)\.0\.', r'stages.\1.patch_embed.',
                         key)
            key = re.sub(r'^layers\.(\d+)\.1\.0\.pos_embed$',
                         r'stages.\1.pos_embed.weight', key)
            key = re.sub(
                r'^layers\.(\d+)\.1\.(\d+)\.', lambda m:
                f'stages.{m.group(1)}.blocks.{int(m.group(2)) - offset}.',
                key)
            key = re.sub(r'^layers\.(\d+)\.2\.', r'stages.\1.norm.', key)
            m = re.match(r'(.+\.attn\.)attn\.(in_proj_|out_proj\.)'
                         r'(weight|bias)$', key)
            if m and m.group(2) == 'in_proj_':
                q, kv = value.split([value.shape[0] // 3,
                                     value.shape[0] // 3 * 2])
                migrated[f'{m.group(1)}q.{m.group(3)}'] = q
                migrated[f'{m.group(1)}kv.{m.group(3)}'] = kv
                continue
            if m:
                key = f'{m.group(1)}proj.{m.group(3)}'
            m = re.match(r'(.+\.ffn\.layers\.)([03])\.(weight|bias)$', key)
            if m and not conv_ffn:  # two 1x1 convs: mmcv's Linear FFN
                layer = '0.0' if m.group(2) == '0' else '1'
                key = f'{m.group(1)}{layer}.{m.group(3)}'
                value = value.flatten(1) if value.dim() == 4 else value
            migrated[key] = value
        return migrated


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
                         block_attention) -> StateDict:
    """Official PVT / PVTv2 keys (whai362/PVT, FLatten-PVT) -> ours; other
    layouts pass through.

    ``patch_embed1`` -> the stem ``patch_embed``, ``patch_embed{i}`` ->
    ``stages.{i-1}.patch_embed`` (``proj`` -> ``projection``),
    ``pos_embed{i}`` -> ``stages.{i-1}.pos_embed.weight`` (PVT-v1's
    class-token row dropped), ``block{i}.{j}`` -> ``stages.{i-1}.blocks.{j}``
    (the MLP as mmcv's FFN, or PVTv2's as :class:`ConvFFN`; the attention's
    tensors through the converter a family registered for the model's
    attention of that block, e.g. FLatten's), PVTv2's ``norm{i}`` ->
    ``stages.{i-1}.norm``. PVT's final ``norm`` (applied only to the class
    token, which is dropped) and ``cls_token`` are dropped; ``head.*`` is
    left for the classifier.

    Args:
        state_dict (dict): The file's tensors.
        block_attention (callable): ``(stage, block) -> (attention name,
            windowed)`` of the model the file is loaded into.
    """
    if not any(re.match(r'block\d+\.', k) for k in state_dict):
        return state_dict
    conv_ffn = any('.mlp.dwconv.' in k for k in state_dict)
    converted = OrderedDict()
    for key, value in state_dict.items():
        if key.startswith('norm.') or key == 'cls_token':
            continue
        m = re.match(r'block(\d+)\.(\d+)\.(.+)', key)
        if m:
            stage, block = int(m.group(1)) - 1, int(m.group(2))
            prefix = f'stages.{stage}.blocks.{block}.'
            convert, _ = block_converter('pvt', block_attention, stage,
                                         block, convert_pvt_block)
            converted.update(convert(prefix, m.group(3), value, conv_ffn))
            continue
        m = re.match(r'(patch_embed|pos_embed|norm)(\d+)(.*)', key)
        if m:
            part, stage, rest = m.group(1), int(m.group(2)) - 1, m.group(3)
            if part == 'patch_embed':
                rest = rest.replace('.proj.', '.projection.')
            elif part == 'pos_embed':
                rest = '.weight'
                side = math.isqrt(value.shape[1] - 1)
                if side * side == value.shape[1] - 1:  # a class-token row
                    value = value[:, 1:]
            key = f'stages.{stage}.{part}{rest}'
            if part == 'patch_embed' and stage == 0:
                key = f'patch_embed{rest}'
        converted[key] = value
    return converted


def convert_pvt_block(prefix: str, name: str, value: torch.Tensor,
                      conv_ffn: bool = False) -> StateDict:
    """One official PVT-block tensor -> ours (``prefix`` + our name): the
    attention keeps its names; the MLP becomes mmcv's ``FFN``
    (``ffn.layers.0.0``, ``ffn.layers.1``), or with PVTv2's depthwise conv
    (``conv_ffn``) :class:`ConvFFN`: 1x1 convs ``ffn.layers.{0,4}`` around
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
