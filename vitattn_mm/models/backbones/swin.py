"""One Swin skeleton for every attention.

:class:`AttnSwinTransformer` is the Swin Transformer of mmdet, mmseg and
mmpretrain (same keywords, same weight names, same results) whose
attention is chosen per stage or per block: by default Swin's
:class:`~vitattn_mm.models.attentions.WindowMSA` in shifted windows
(:class:`~vitattn_mm.models.attentions.WindowedAttention`), or any
registered attention, in windows or over the whole map.
"""
import functools
import math
import re
from collections import OrderedDict
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn

from ...registry import register_model
from ..attentions.base import attention_class
from ..attentions.windowed import WindowedAttention
from ..attentions.cfgs import resolve_attn_cfgs
from ..layers.blocks import TransformerBlock
from ..layers.common import (InvalidArgument, check_type,
                             pretrain_input_size, to_2tuple_int)
from ..layers.padding import CornerPatchEmbed, CornerPatchMerging
from ..layers.pos_embed import resize_pos_embed
from ..layers.stage import (drop_path_slices, init_linear_and_norm,
                            learned_table, norm_layer)
from ..checkpoint.pretrained import StateDict
from .backbone_spec import BackboneSpec
from .base_backbone import StagedBackbone
from .input_size import grids_at, strided_grid_sides
from .stage_spec import StageSpec
from ..checkpoint.adapt import block_converter

#: Swin's attention in the stages that name none.
SWIN_ATTENTION = dict(type='WindowedAttention', window_msa='WindowMSA')


@register_model
class AttnSwinTransformer(StagedBackbone):
    """Swin Transformer whose attention is chosen per stage or block.

    The Swin of mmdet, mmseg and mmpretrain: their keywords and defaults,
    their weight names (a stock Swin's state dict loads strictly) and their
    results when no attention is swapped. Patch embedding, then four
    stages of pre-norm blocks, each but the last ended by a 2x2 patch
    merging; output ``i`` through its own norm ``norm{i}``.

    Defaults that differ between the stock classes are those of the
    package whose config builds it (see
    :mod:`~vitattn_mm.models.backbones.packages`): mmpretrain's class
    returns the last stage (``out_indices=(3,)``), does not pad maps
    smaller than a window (``pad_small_map=False``) and counts
    ``frozen_stages`` as mmpretrain's Swin (``k`` freezes the stem and
    stages ``0..k``); mmdet's and mmseg's class, and plain Python, return
    every stage, pad small maps and freeze the stem and ``k`` stages.
    ``drop_rate`` means what it means in mmdet (dropout after the patch
    embedding, in the attention projection and the FFN).

    Args:
        arch (str | dict): 'tiny', 'small', 'base', 'large' (or 't', 's',
            'b', 'l'), or a dict with ``embed_dims`` (int), ``depths`` and
            ``num_heads`` (one per stage). Default: 'tiny'.
        attn_cfgs (dict | list | callable, optional): The attention of
            every stage (a dict), of each stage (a list; None is Swin's) or
            of each block (a list in the list), or a family's plan
            ``plan(arch, grids)`` returning one of these.
            ``dict(type='ShiftWindowMSA', window_msa=NAME, **kwargs)`` (or
            ``'WindowedAttention'``) runs the registered attention NAME in
            Swin's shifted windows (the skeleton sets the window, the shift
            of odd blocks and ``pad_small_map``); any other type runs over
            the whole map. Default: None (Swin everywhere).
        pretrain_img_size (int | tuple[int, int]): Input size of the
            pretrained weights: sizes absolute position embeddings and the
            grid token attentions learn positional encodings on (mmdet's
            name; mmpretrain's is ``img_size``). Default: 224.
        in_channels (int): Input channels. Default: 3.
        patch_size (int): Stem patch size. Default: 4.
        window_size (int): Window of the shifted-window stages. Default: 7.
        mlp_ratio (float): FFN hidden channels / C. Default: 4.
        qkv_bias (bool): Bias in the attention projections. Default: True.
        qk_scale (float, optional): Window attention scale override
            (mmdet). Default: None.
        patch_norm (bool): LayerNorm after the patch embedding (mmdet).
            Default: True.
        drop_rate (float): Dropout (see above). Default: 0.
        attn_drop_rate (float): Dropout of the attention weights.
            Default: 0.
        drop_path_rate (float): Stochastic depth rate. Default: 0.1.
        out_indices (Sequence[int] | int, optional): Output stages.
            Default: None (the package's, see above).
        use_abs_pos_embed (bool): Learned absolute position embedding
            (``absolute_pos_embed``), resized to the running grid (and, when
            loaded from another input size, to this model's).
            Default: False.
        interpolate_mode (str): How it is resized (mmpretrain).
            Default: 'bicubic'.
        pad_small_map (bool, optional): Pad maps smaller than a window and
            shift a map of one window (dense prediction); False follows the
            original classifiers. Default: None (the package's).
        act_cfg (dict): FFN activation. Default: ``dict(type='GELU')``.
        norm_cfg (dict): Norm layers. Default: ``dict(type='LN')``.
        embed_dims, depths, num_heads: mmdet's names for the arch; given,
            they override the named arch's values. Default: None.
        strides (Sequence[int]): mmdet's stage strides; only
            ``(patch_size, 2, 2, 2)`` is supported. Default: None.
        img_size (int | tuple[int, int], optional): mmpretrain's name for
            ``pretrain_img_size``. Default: None.
        patch_cfg (dict, optional): mmpretrain's overrides of the patch
            embedding (mmcv ``PatchEmbed`` arguments). Default: None.
        stage_cfgs (dict, optional): mmpretrain's per-stage block settings;
            only an empty one (give ``attn_cfgs`` instead). Default: None.
        out_after_downsample (bool): mmpretrain's; only False.
            Default: False.
        **kwargs: :class:`StagedBackbone`'s ``frozen_stages``,
            ``norm_eval``, ``with_cp``, ``convert_weights`` (mmdet's switch
            for official Swin files), ``pretrained`` and ``init_cfg``.
    """
    arch_zoo = {
        ('t', 'tiny'):
        dict(embed_dims=96, depths=[2, 2, 6, 2], num_heads=[3, 6, 12, 24]),
        ('s', 'small'):
        dict(embed_dims=96, depths=[2, 2, 18, 2], num_heads=[3, 6, 12, 24]),
        ('b', 'base'):
        dict(embed_dims=128, depths=[2, 2, 18, 2], num_heads=[4, 8, 16, 32]),
        ('l', 'large'):
        dict(embed_dims=192, depths=[2, 2, 18, 2], num_heads=[6, 12, 24, 48]),
    }
    arch_keys = ('embed_dims', 'depths', 'num_heads')
    conventions = {
        None: dict(out_indices=(0, 1, 2, 3), pad_small_map=True),
        # mmpretrain's Swin freezes stages 0..k and leaves the absolute
        # position embedding trainable.
        'mmpretrain': dict(out_indices=(3, ), pad_small_map=False,
                           frozen_stages_offset=1,
                           freezes_abs_pos_embed=False),
    }

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 attn_cfgs=None,
                 pretrain_img_size: Union[int, Tuple[int, int]] = 224,
                 in_channels: int = 3,
                 patch_size: int = 4,
                 window_size: int = 7,
                 mlp_ratio: float = 4.,
                 qkv_bias: bool = True,
                 qk_scale: Optional[float] = None,
                 patch_norm: bool = True,
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0.1,
                 out_indices: Optional[Union[int, Sequence[int]]] = None,
                 use_abs_pos_embed: bool = False,
                 interpolate_mode: str = 'bicubic',
                 pad_small_map: Optional[bool] = None,
                 act_cfg: dict = dict(type='GELU'),
                 norm_cfg: dict = dict(type='LN'),
                 embed_dims: Optional[int] = None,
                 depths: Optional[Sequence[int]] = None,
                 num_heads: Optional[Sequence[int]] = None,
                 strides: Optional[Sequence[int]] = None,
                 img_size: Optional[Union[int, Tuple[int, int]]] = None,
                 patch_cfg: Optional[dict] = None,
                 stage_cfgs: Optional[dict] = None,
                 out_after_downsample: bool = False,
                 **kwargs):
        arch = self.resolve_arch(arch, embed_dims=embed_dims, depths=depths,
                                 num_heads=num_heads)
        num_stages = len(arch['depths'])
        super().__init__(
            num_stages, self.conventional('out_indices', out_indices),
            **kwargs)
        if strides is not None and tuple(strides) != (
                patch_size, ) + (2, ) * (num_stages - 1):
            raise InvalidArgument(
                f'strides {tuple(strides)}: Swin merges 2x2 patches, so '
                f'only ({patch_size}, 2, 2, ...) is supported')
        if stage_cfgs:
            raise ValueError('stage_cfgs (mmpretrain\'s per-stage block '
                             'settings) is not supported: give attn_cfgs, '
                             'window_size, mlp_ratio ...')
        if out_after_downsample:
            raise ValueError('out_after_downsample=True is not supported')
        pretrain_img_size = pretrain_input_size(img_size, pretrain_img_size)
        for name, value in (('qkv_bias', qkv_bias), ('patch_norm', patch_norm),
                            ('use_abs_pos_embed', use_abs_pos_embed)):
            check_type(name, value, bool)
        self.embed_dims = arch['embed_dims']
        self.depths = list(arch['depths'])
        self.num_heads = list(arch['num_heads'])
        self.window_size = window_size
        self.pad_small_map = self.conventional('pad_small_map',
                                               pad_small_map)
        self.num_features = [self.embed_dims * 2**i for i in range(num_stages)]
        self.interpolate_mode = interpolate_mode

        grid_sides = functools.partial(
            strided_grid_sides, [patch_size * 2**i for i in range(num_stages)])
        grids = grids_at(grid_sides, to_2tuple_int(pretrain_img_size,
                                                   'pretrain_img_size'))
        patch_resolution = self.patch_resolution = grids[0]
        self.use_abs_pos_embed = use_abs_pos_embed
        cfgs = resolve_attn_cfgs(attn_cfgs, arch, self.depths, grids,
                                 SWIN_ATTENTION)
        drop_paths = drop_path_slices(drop_path_rate, self.depths)
        stages = []
        for i, dims in enumerate(self.num_features):
            stages.append(StageSpec(
                dims, self.num_heads[i], grids[i],
                [self.window_settings(cfg, shift=j % 2 == 1)
                 for j, cfg in enumerate(cfgs[i])], drop_paths[i],
                functools.partial(TransformerBlock, dims,
                                  ffn_ratio=mlp_ratio, ffn_drop=drop_rate,
                                  act_cfg=act_cfg, norm_cfg=norm_cfg),
                qkv_bias=qkv_bias,
                settings=dict(qk_scale=qk_scale, attn_drop=attn_drop_rate,
                              proj_drop=drop_rate),
                downsample=functools.partial(
                    CornerPatchMerging, in_channels=dims,
                    out_channels=2 * dims, norm_cfg=norm_cfg)
                if i < num_stages - 1 else None))
        self.build(BackboneSpec(
            arch, dict(
                patch_embed=functools.partial(CornerPatchEmbed, **dict(
                    dict(in_channels=in_channels,
                         embed_dims=self.embed_dims,
                         conv_type='Conv2d',
                         kernel_size=patch_size,
                         stride=patch_size,
                         norm_cfg=norm_cfg if patch_norm else None),
                    **(patch_cfg or {}))),
                absolute_pos_embed=functools.partial(
                    learned_table, (1, math.prod(patch_resolution),
                                    self.embed_dims), std=0.02)
                if use_abs_pos_embed else None,
                drop_after_pos=functools.partial(nn.Dropout, drop_rate)),
            stages, self.out_indices, grid_sides,
            output_norm=functools.partial(norm_layer, norm_cfg)))
        self.apply(init_linear_and_norm)

    @staticmethod
    def is_window_attention(cfg: dict) -> bool:
        return issubclass(attention_class(cfg['type']), WindowedAttention)

    def window_settings(self, cfg: dict, shift: bool) -> dict:
        """A block's attention config with what the skeleton decides for
        Swin's windows: the window, the shift of odd blocks and
        ``pad_small_map``."""
        cfg = dict(cfg)
        if self.is_window_attention(cfg):
            cfg.setdefault('window_size', self.window_size)
            cfg.setdefault('pad_small_map', self.pad_small_map)
            if 'shift_size' not in cfg:
                cfg.setdefault('shift', shift)
        return cfg

    # ----------------------------------------------------------- forward
    def forward_stem(self, x: torch.Tensor):
        x, hw_shape = self.patch_embed(x)
        if self.use_abs_pos_embed:
            x = x + resize_pos_embed(self.absolute_pos_embed,
                                     self.patch_resolution, hw_shape,
                                     self.interpolate_mode)
        return self.drop_after_pos(x), hw_shape

    def stem_parameters(self):
        if self.use_abs_pos_embed and self.default('freezes_abs_pos_embed',
                                                   True):
            return [self.absolute_pos_embed]
        return []

    # ----------------------------------------------------------- weights
    def position_tables(self):
        tables = super().position_tables()
        if self.use_abs_pos_embed:
            tables['absolute_pos_embed'] = (self.patch_resolution,
                                            self.interpolate_mode, 0)
        return tables

    @staticmethod
    def convert_official_keys(state_dict: StateDict,
                              block_attention) -> StateDict:
        """Official Swin keys -> ours (see :func:`convert_official_swin`)."""
        return convert_official_swin(state_dict, block_attention)

    def migrate_layout(self, state_dict: StateDict) -> StateDict:
        """mmpretrain's and mmdet's older layouts -> ours: mmpretrain's
        version-1 final ``norm`` -> ``norm{last}`` and its ``attn_mask``
        buffers dropped; mmdet's ``(1, C, H, W)`` absolute position
        embedding -> ``(1, H*W, C)``."""
        migrated = OrderedDict()
        for key, value in state_dict.items():
            if key.endswith('attn_mask'):
                continue
            if key.startswith('norm.'):
                key = f'norm{self.num_stages - 1}.' + key[len('norm.'):]
            if key == 'absolute_pos_embed' and value.dim() == 4:
                value = value.flatten(2).transpose(1, 2)
            migrated[key] = value
        return migrated


#: Official Swin-block names -> ours (the attention's are its own; in
#: windows they go under ``attn.w_msa``).
_SWIN_BLOCK_NAMES = {
    'mlp.fc1.weight': 'ffn.layers.0.0.weight',
    'mlp.fc1.bias': 'ffn.layers.0.0.bias',
    'mlp.fc2.weight': 'ffn.layers.1.weight',
    'mlp.fc2.bias': 'ffn.layers.1.bias',
}


def convert_official_swin(state_dict: StateDict,
                          block_attention) -> StateDict:
    """Official Swin keys (microsoft/Swin-Transformer, FLatten-Swin) ->
    ours; other layouts pass through unchanged.

    ``layers.{i}.blocks.{j}`` -> ``stages.{i}.blocks.{j}`` (the MLP as
    mmcv's FFN; the attention's tensors under ``attn.w_msa`` where the
    model runs it in windows, through the converter a family registered for
    that attention, e.g. FLatten's), ``layers.{i}.downsample`` ->
    ``stages.{i}.downsample`` (reordered for mmcv's unfold),
    ``patch_embed.proj`` -> ``patch_embed.projection``, ``norm`` ->
    ``norm{last}``. The derived ``attn_mask`` buffers are dropped;
    ``head.*`` is left for the classifier.

    Args:
        state_dict (dict): The file's tensors.
        block_attention (callable): ``(stage, block) -> (attention name,
            windowed)`` of the model the file is loaded into
            (:meth:`StagedBackbone.block_attention`).
    """
    if not any(k.startswith('layers.') for k in state_dict):
        return state_dict
    num_stages = 1 + max(
        int(k.split('.')[1]) for k in state_dict if k.startswith('layers.'))
    converted = OrderedDict()
    for key, value in state_dict.items():
        if key.endswith('attn_mask'):
            continue
        m = re.match(r'layers\.(\d+)\.downsample\.(reduction|norm)\.(.+)', key)
        if m:
            stage, part, name = int(m.group(1)), m.group(2), m.group(3)
            converted[f'stages.{stage}.downsample.{part}.{name}'] = \
                _merging_weight_to_unfold_order(value)
            continue
        m = re.match(r'layers\.(\d+)\.blocks\.(\d+)\.(.+)', key)
        if m:
            stage, block, name = int(m.group(1)), int(m.group(2)), m.group(3)
            prefix = f'stages.{stage}.blocks.{block}.'
            convert, windowed = block_converter(
                'swin', block_attention, stage, block, _convert_swin_block)
            for new, tensor in convert(prefix, name, value).items():
                if windowed and new.startswith(prefix + 'attn.'):
                    new = prefix + 'attn.w_msa.' + new[len(prefix) + 5:]
                converted[new] = tensor
            continue
        if key.startswith('patch_embed.proj.'):
            key = key.replace('patch_embed.proj.', 'patch_embed.projection.')
        elif key.startswith('norm.'):
            key = f'norm{num_stages - 1}.' + key[len('norm.'):]
        converted[key] = value
    return converted


def _convert_swin_block(prefix: str, name: str,
                        value: torch.Tensor) -> StateDict:
    """One official Swin-block tensor -> ours."""
    return {prefix + _SWIN_BLOCK_NAMES.get(name, name): value}


def _merging_weight_to_unfold_order(weight: torch.Tensor) -> torch.Tensor:
    """Reorder the official patch merging's input channels for mmcv's.

    The official layer concatenates the 2x2 neighbours position-major in
    the order (0,0), (1,0), (0,1), (1,1); mmcv's ``nn.Unfold`` lays them out
    channel-major in the order (0,0), (0,1), (1,0), (1,1). Works on the
    reduction weight (``(out, 4C)``) and the norm's weight / bias (``(4C,)``).
    """
    lead = weight.shape[:-1]
    weight = weight.reshape(*lead, 4, weight.shape[-1] // 4)
    weight = weight[..., [0, 2, 1, 3], :].transpose(-1, -2)
    return weight.reshape(*lead, -1)
