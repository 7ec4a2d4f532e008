"""One CSwin skeleton for every token attention.

Dong et al., "CSWin Transformer: A General Vision Transformer Backbone with
Cross-Shaped Windows", CVPR 2022 (https://arxiv.org/abs/2107.00652).

The skeleton follows the official layout (a 7x7 stride-4 conv stem, 3x3
stride-2 conv merging between stages, each followed by a LayerNorm, the
shared pre-norm block) and takes any registered token attention per stage,
CSwin's :class:`~vitattn_mm.models.attentions.CrossShapedWindowAttention`
by default. Added for dense prediction: any input size (the official
classifier takes one size only), NCHW outputs with a LayerNorm each, and
loading of the official files.
"""
import functools
import re
from collections import OrderedDict
from typing import Sequence, Tuple, Union

import torch

from ...registry import register_model
from ..attentions.cfgs import resolve_attn_cfgs
from ..layers.blocks import TransformerBlock
from ..layers.padding import CornerPatchEmbed, pad_corner
from ..layers.stage import (drop_path_slices, init_linear_and_norm,
                            norm_layer)
from ..layers.common import to_2tuple_int
from ..checkpoint.pretrained import StateDict
from .backbone_spec import BackboneSpec
from .base_backbone import StagedBackbone
from .input_size import grids_at, strided_grid_sides
from .stage_spec import StageSpec
from ..checkpoint.adapt import block_converter


@register_model
class AttnCSwinTransformer(StagedBackbone):
    """CSwin Transformer whose attention is chosen per stage or block.

    The stem ``patch_embed`` (a 7x7 stride-4 conv, padding 2, and a
    LayerNorm); stage ``i``: a patch embedding after the first (a 3x3
    stride-2 conv, padding 1, and a LayerNorm, ``stages.{i}.patch_embed``),
    then ``depths[i]`` shared pre-norm
    :class:`TransformerBlock` s around the stage's attention, and a
    LayerNorm ``norm{i}`` on each output.

    Images whose sides are not multiples of 4 are zero-padded at the
    bottom/right first, so stage ``i`` has ``ceil(H / 2**(i+2))`` rows as in
    the other backbones (the official stem floors, see docs/flatten.md).

    Args:
        arch (str | dict): 'tiny', 'small', 'base', 'large' (or 't', 's',
            'b', 'l'), or a dict with ``embed_dims`` (int), ``depths`` and
            ``num_heads`` (one per stage). Default: 'tiny'.
        attn_cfgs (dict | list | callable, optional): The attention of
            every stage (a dict), of each stage (a list; None is CSwin's) or
            of each block (a list in the list), or a family's plan
            ``plan(arch, grids)``. The skeleton adds ``embed_dims``,
            ``num_heads``, ``qkv_bias`` and, to attentions that take them,
            ``grid_size`` (the stage's pretraining grid) and ``split_size``
            (the stage's ``split_sizes`` entry; None in the last stage).
            Default: None (CSwin's cross-shaped windows everywhere, the
            last stage over the whole map).
        split_sizes (Sequence[int]): Stripe width per stage (the last
            stage's is unused: it attends over the whole map).
            Default: (1, 2, 7, 7).
        pretrain_img_size (int | tuple[int, int]): Input size of the
            pretrained weights: sizes learned positional encodings.
            Default: 224.
        in_channels (int): Input channels. Default: 3.
        mlp_ratio (float): FFN hidden channels / C. Default: 4.
        qkv_bias (bool): Bias in the attention projections. Default: True.
        drop_rate (float): Dropout in the attention projection and the FFN.
            Default: 0.
        attn_drop_rate (float): Dropout of the attention weights.
            Default: 0.
        drop_path_rate (float): Stochastic depth rate. Default: 0.1.
        out_indices (Sequence[int] | int): Output stages, each through its
            own norm ``norm{i}``. Default: (0, 1, 2, 3).
        act_cfg (dict): FFN activation. Default: ``dict(type='GELU')``.
        norm_cfg (dict): Norm layers. Default: ``dict(type='LN')``.
        **kwargs: :class:`StagedBackbone`'s ``frozen_stages``,
            ``norm_eval``, ``with_cp``, ``convert_weights``, ``pretrained``
            and ``init_cfg``.
    """
    arch_zoo = {
        ('t', 'tiny'):
        dict(embed_dims=64, depths=[1, 2, 21, 1], num_heads=[2, 4, 8, 16]),
        ('s', 'small'):
        dict(embed_dims=64, depths=[2, 4, 32, 2], num_heads=[2, 4, 8, 16]),
        ('b', 'base'):
        dict(embed_dims=96, depths=[2, 4, 32, 2], num_heads=[4, 8, 16, 32]),
        ('l', 'large'):
        dict(embed_dims=144, depths=[2, 4, 32, 2],
             num_heads=[6, 12, 24, 24]),
    }
    arch_keys = ('embed_dims', 'depths', 'num_heads')

    #: Stride of the stem: images are padded to a multiple of it.
    stem_stride = 4

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 attn_cfgs=None,
                 split_sizes: Sequence[int] = (1, 2, 7, 7),
                 pretrain_img_size: Union[int, Tuple[int, int]] = 224,
                 in_channels: int = 3,
                 mlp_ratio: float = 4.,
                 qkv_bias: bool = True,
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0.1,
                 out_indices: Union[int, Sequence[int]] = (0, 1, 2, 3),
                 act_cfg: dict = dict(type='GELU'),
                 norm_cfg: dict = dict(type='LN'),
                 **kwargs):
        arch = self.resolve_arch(arch)
        super().__init__(len(arch['depths']), out_indices, **kwargs)
        embed_dims, depths = arch['embed_dims'], arch['depths']
        num_stages = self.num_stages
        if len(split_sizes) != num_stages:
            raise ValueError(f'split_sizes has {len(split_sizes)} entries '
                             f'for {num_stages} stages')
        self.embed_dims = embed_dims
        self.depths = list(depths)
        self.num_features = [embed_dims * 2**i for i in range(num_stages)]
        self.split_sizes = tuple(split_sizes)

        grid_sides = functools.partial(
            strided_grid_sides,
            [self.stem_stride * 2**i for i in range(num_stages)])
        grids = grids_at(grid_sides, to_2tuple_int(pretrain_img_size,
                                                   'pretrain_img_size'))
        cfgs = resolve_attn_cfgs(attn_cfgs, arch, depths, grids,
                                 dict(type='CrossShapedWindowAttention'))
        drop_paths = drop_path_slices(drop_path_rate, depths)
        patch_embeds = [functools.partial(
            CornerPatchEmbed,
            in_channels=in_channels if i == 0 else dims // 2,
            embed_dims=dims,
            conv_type='Conv2d',
            kernel_size=7 if i == 0 else 3,
            stride=self.stem_stride if i == 0 else 2,
            padding=2 if i == 0 else 1,
            norm_cfg=norm_cfg) for i, dims in enumerate(self.num_features)]
        stages = []
        for i, dims in enumerate(self.num_features):
            # The last stage attends over the whole map.
            split = split_sizes[i] if i < num_stages - 1 else None
            stages.append(StageSpec(
                dims, arch['num_heads'][i], grids[i], cfgs[i], drop_paths[i],
                functools.partial(TransformerBlock, dims,
                                  ffn_ratio=mlp_ratio, ffn_drop=drop_rate,
                                  act_cfg=act_cfg, norm_cfg=norm_cfg),
                qkv_bias=qkv_bias,
                settings=dict(attn_drop=attn_drop_rate, proj_drop=drop_rate),
                context=dict(grid_size=grids[i], split_size=split),
                # The first stage's patch embedding is the stem.
                patch_embed=patch_embeds[i] if i else None))
        self.build(BackboneSpec(
            arch, dict(patch_embed=patch_embeds[0]), stages,
            self.out_indices, grid_sides,
            output_norm=functools.partial(norm_layer, norm_cfg)))
        self.apply(init_linear_and_norm)

    def forward_stem(self, x: torch.Tensor):
        # Without it the 7x7 stride-4 stem (padding 2) drops the last row
        # or column of patches of a side that is 1 or 2 modulo 4.
        return self.patch_embed(pad_corner(x, (self.stem_stride, ) * 2))

    # ----------------------------------------------------------- weights
    @staticmethod
    def convert_official_keys(state_dict: StateDict,
                              block_attention) -> StateDict:
        """See :func:`convert_official_cswin`."""
        return convert_official_cswin(state_dict, block_attention)

#: Official CSwin-block names -> ours (cross-shaped attention blocks).
_CSWIN_BLOCK_NAMES = (
    (r'qkv\.', 'attn.qkv.'),
    (r'proj\.', 'attn.proj.'),
    (r'attns\.(\d+)\.get_v\.', r'attn.lepe.\1.'),
    (r'mlp\.fc1\.', 'ffn.layers.0.0.'),
    (r'mlp\.fc2\.', 'ffn.layers.1.'),
)


def convert_official_cswin(state_dict: StateDict,
                           block_attention) -> StateDict:
    """Official CSwin keys (microsoft/CSWin-Transformer and
    FLatten-CSwin) -> ours; other layouts pass through unchanged.

    ``stage1_conv_embed.{0,2}`` -> the stem ``patch_embed.{projection,
    norm}``, ``merge{i}.{conv,norm}`` -> ``stages.{i}.patch_embed.
    {projection,norm}``, ``stage{s}.{j}`` -> ``stages.{s-1}.blocks.{j}``
    (``qkv`` / ``proj`` into ``attn``, ``attns.{b}.get_v`` ->
    ``attn.lepe.{b}``, the MLP as mmcv's ``FFN``; through the converter a
    family registered for the model's attention of that block, e.g.
    FLatten's), ``norm`` -> ``norm{last}``. ``head.*`` is left for the
    classifier.

    Args:
        state_dict (dict): The file's tensors.
        block_attention (callable): ``(stage, block) -> (attention name,
            windowed)`` of the model the file is loaded into.
    """
    if not any(k.startswith('stage1_conv_embed.') for k in state_dict):
        return state_dict
    num_stages = max(  # numbered from 1
        int(m.group(1))
        for m in (re.match(r'stage(\d+)\.', k) for k in state_dict) if m)
    converted = OrderedDict()
    for key, value in state_dict.items():
        m = re.match(r'stage(\d+)\.(\d+)\.(.+)', key)
        if m:
            stage, block = int(m.group(1)) - 1, int(m.group(2))
            prefix = f'stages.{stage}.blocks.{block}.'
            convert, _ = block_converter('cswin', block_attention, stage,
                                         block, _convert_cswin_block)
            converted.update(convert(prefix, m.group(3), value))
            continue
        m = re.match(r'stage1_conv_embed\.(0|2)\.(.+)', key)
        if m:
            part = 'projection' if m.group(1) == '0' else 'norm'
            converted[f'patch_embed.{part}.{m.group(2)}'] = value
            continue
        m = re.match(r'merge(\d+)\.(conv|norm)\.(.+)', key)
        if m:
            part = 'projection' if m.group(2) == 'conv' else 'norm'
            converted[f'stages.{m.group(1)}.patch_embed.{part}.'
                      f'{m.group(3)}'] = value
            continue
        if key.startswith('norm.'):
            key = f'norm{num_stages - 1}.' + key[len('norm.'):]
        converted[key] = value
    return converted


def _convert_cswin_block(prefix: str, name: str,
                         value: torch.Tensor) -> StateDict:
    """One official CSwin-block tensor -> ours."""
    for pattern, repl in _CSWIN_BLOCK_NAMES:
        name, found = re.subn('^' + pattern, repl, name)
        if found:
            break
    return {prefix + name: value}
