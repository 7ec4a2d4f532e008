"""One plain-ViT skeleton for every attention.

:class:`AttnViT` is mmpretrain's and mmseg's ``VisionTransformer`` (their
keywords, arch names, defaults and results; their state dicts load) whose
attention is chosen per block: by default
:class:`~vitattn_mm.models.attentions.MultiheadSelfAttention`, or any
registered attention. A plain ViT is staged by its blocks: stage ``i`` is
block ``i``, as ``out_indices`` and ``frozen_stages`` count them.
"""
import functools
import math
import re
from collections import OrderedDict
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmengine.model import ModuleList
from mmengine.model.weight_init import trunc_normal_

from ...registry import register_model
from ..attentions.base import Grid, attention_class
from ..attentions.cfgs import resolve_attn_cfgs
from ..layers.blocks import TransformerBlock
from ..layers.common import (InvalidArgument, check_type, nlc_to_nchw,
                             pretrain_input_size, to_2tuple_int)
from ..layers.padding import CornerPatchEmbed, grid_after_stride
from ..layers.patch_embed import PixelNormPatchEmbed
from ..layers.pos_embed import resize_pos_embed, sincos_pos_embed_2d
from ..layers.stage import (drop_path_slices, init_linear_and_norm,
                            learned_table, norm_layer)
from ..checkpoint.pretrained import StateDict
from .backbone_spec import BackboneSpec
from .base_backbone import StagedBackbone
from .input_size import strided_grid_sides
from .stage_spec import StageSpec

#: ViT's attention in the blocks that name none.
VIT_ATTENTION = dict(type='MultiheadSelfAttention')

DEIT = dict(tiny=dict(embed_dims=192, depth=12, num_heads=3),
            small=dict(embed_dims=384, depth=12, num_heads=6),
            base=dict(embed_dims=768, depth=12, num_heads=12))


def _vit(embed_dims: int, depth: int, num_heads: int, ffn: int) -> dict:
    return dict(embed_dims=embed_dims, depth=depth, num_heads=num_heads,
                feedforward_channels=ffn)


@register_model
class AttnViT(StagedBackbone):
    """Vision Transformer whose attention is chosen per block.

    mmpretrain's and mmseg's ``VisionTransformer``: a patch embedding, a
    class token (``with_cls_token``), a learned position embedding resized
    to the running grid (``interpolate_mode``), ``pre_norm``, pre-norm
    blocks, a final norm (``final_norm``, ``ln1``) and outputs by
    ``out_type`` (mmpretrain's ``'cls_token'``, ``'featmap'``,
    ``'avg_featmap'`` through ``ln2``, ``'raw'``; mmseg's feature maps,
    with ``output_cls_token``). Defaults that differ between the two are
    those of the package whose config builds it (mmseg's class, see
    :mod:`~vitattn_mm.models.backbones.packages`; mmpretrain's in
    mmpretrain's and mmdet's class and in plain Python): ``final_norm``
    (False / True), ``out_type`` ('featmap' / 'cls_token'), ``norm_cfg``
    (LN eps 1e-5 / 1e-6) and ``patch_bias`` (False / True).
    ``frozen_stages=k`` freezes the stem and the first k blocks as
    mmpretrain does (0 freezes nothing).

    Added: any attention per block (``attn_cfgs``), Simple ViT's layout
    (``patch_embed='pixel_norm'``, ``pos_embed='sincos'``), and a norm on
    every output (``out_norm``: ``norm{i}``; for ``'avg_featmap'`` on the
    mean token).

    Args:
        arch (str | dict): Every name of mmpretrain's ViT arch zoo
            ('s', 'b', 'l', 'h', 'eva-g', 'deit-t', 'deit-s', 'deit-b',
            'dinov2-s', 'dinov2-g' and their long forms), with its sizes,
            and 'ti' / 'tiny' (DeiT-Ti), or a
            dict with ``embed_dims``, ``depth`` (or ``num_layers``),
            ``num_heads`` and optionally ``feedforward_channels``.
            mmseg's keywords below override it. Default: 'base'.
        attn_cfgs (dict | list | callable, optional): The attention of
            every block (a dict) or of each block (a list; None is ViT's),
            or a family's plan ``plan(arch, grids)``; the skeleton
            adds ``embed_dims``, ``num_heads``, ``qkv_bias`` and, to those
            that take it, the pretraining grid ``grid_size``.
            Default: None.
        img_size (int | tuple[int, int]): Input size of the pretrained
            weights: sizes the position embedding. Default: 224.
        patch_size (int): Patch side. Default: 16.
        in_channels (int): Input channels. Default: 3.
        out_indices (Sequence[int] | int): Blocks whose output to return.
            Default: -1.
        drop_rate (float): Dropout after the position embedding, in the
            attention projection and the FFN. Default: 0.
        attn_drop_rate (float): Dropout of the attention weights (mmseg).
            Default: 0.
        drop_path_rate (float): Stochastic depth rate. Default: 0.
        qkv_bias (bool): Default: True.
        norm_cfg (dict, optional): Norm layers. Default: None (the package's).
        act_cfg (dict): FFN activation. Default: ``dict(type='GELU')``.
        final_norm (bool, optional): Norm after the last block, on the main
            path (``ln1``). Default: None (the package's).
        out_type (str, optional): See above. Default: None (the package's).
        with_cls_token (bool): A class token (the attentions must be
            ``grid_free``). Default: True.
        output_cls_token (bool): mmseg's: feature maps come with the class
            token, ``[featmap, cls_token]``. Default: False.
        interpolate_mode (str): How the position embedding is resized.
            Default: 'bicubic'.
        pre_norm (bool): A norm after the position embedding
            (``pre_norm``). Default: False.
        patch_bias (bool, optional): Bias of the patch embedding.
            Default: None (the package's; False with ``pre_norm``).
        patch_norm (bool): A norm after the patch embedding (mmseg).
            Default: False.
        patch_pad (str | int): Padding of the patch embedding (mmseg).
            Default: 'corner'.
        patch_cfg (dict, optional): mmpretrain's overrides of the patch
            embedding (mmcv ``PatchEmbed`` arguments). Default: None.
        layer_cfgs (dict, optional): mmpretrain's per-block settings; only
            an empty one (give ``attn_cfgs``). Default: None.
        layer_scale_init_value (float): mmpretrain's; only 0. Default: 0.
        embed_dims, num_layers, num_heads (optional): mmseg's names for the
            arch; given, they override it. Default: None.
        mlp_ratio (float, optional): FFN hidden channels / C (the arch's
            ``feedforward_channels`` otherwise, else 4). Default: None.
        num_fcs (int): mmseg's; only 2. Default: 2.
        out_origin (bool): mmseg's; only False. Default: False.
        frozen_exclude (Sequence[str]): mmseg's: unless it holds 'all',
            every parameter whose name contains none of its strings is
            frozen at construction. Default: ('all', ).
        patch_embed (str): 'conv' or 'pixel_norm' (Simple ViT).
            Default: 'conv'.
        pos_embed (str): 'learned' or 'sincos' (Simple ViT, fixed).
            Default: 'learned'.
        out_norm (bool): A norm per output (``norm{i}``). Default: False.
        **kwargs: :class:`StagedBackbone`'s ``frozen_stages``,
            ``norm_eval``, ``with_cp``, ``convert_weights``, ``pretrained``
            and ``init_cfg``.
    """
    # mmpretrain's names and sizes ('s' is ViT-S of the ViT paper, 768
    # wide; DeiT-S is 'deit-s'), and 'ti' / 'tiny' for DeiT-Ti.
    arch_zoo = {
        ('s', 'small'): _vit(768, 8, 8, 768 * 3),
        ('b', 'base'): _vit(768, 12, 12, 3072),
        ('l', 'large'): _vit(1024, 24, 16, 4096),
        ('h', 'huge'): _vit(1280, 32, 16, 5120),
        ('eva-g', 'eva-giant'): _vit(1408, 40, 16, 6144),
        ('ti', 'tiny', 'deit-t', 'deit-tiny'): DEIT['tiny'],
        ('deit-s', 'deit-small', 'dinov2-s', 'dinov2-small'): DEIT['small'],
        ('deit-b', 'deit-base'): DEIT['base'],
        ('dinov2-g', 'dinov2-giant'): _vit(1536, 40, 24, 6144),
    }
    arch_keys = ('embed_dims', 'depth', 'num_heads')
    arch_aliases = {'num_layers': 'depth'}
    conventions = {
        None: dict(final_norm=True, out_type='cls_token',
                   norm_cfg=dict(type='LN', eps=1e-6), patch_bias=True),
        'mmseg': dict(final_norm=False, out_type='featmap',
                      norm_cfg=dict(type='LN'), patch_bias=False),
    }
    freezes_stem_at_zero = False
    OUT_TYPES = ('cls_token', 'featmap', 'avg_featmap', 'raw')

    def __init__(self,
                 arch: Union[str, dict] = 'base',
                 attn_cfgs=None,
                 img_size: Union[int, Tuple[int, int]] = 224,
                 patch_size: int = 16,
                 in_channels: int = 3,
                 out_indices: Union[int, Sequence[int]] = -1,
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0.,
                 qkv_bias: bool = True,
                 norm_cfg: Optional[dict] = None,
                 act_cfg: dict = dict(type='GELU'),
                 final_norm: Optional[bool] = None,
                 out_type: Optional[str] = None,
                 with_cls_token: bool = True,
                 output_cls_token: bool = False,
                 interpolate_mode: str = 'bicubic',
                 pre_norm: bool = False,
                 patch_bias: Optional[bool] = None,
                 patch_norm: bool = False,
                 patch_pad: Union[str, int] = 'corner',
                 patch_cfg: Optional[dict] = None,
                 layer_cfgs: Optional[dict] = None,
                 layer_scale_init_value: float = 0.,
                 embed_dims: Optional[int] = None,
                 num_layers: Optional[int] = None,
                 num_heads: Optional[int] = None,
                 mlp_ratio: Optional[float] = None,
                 num_fcs: int = 2,
                 out_origin: bool = False,
                 frozen_exclude: Sequence[str] = ('all', ),
                 patch_embed: str = 'conv',
                 pos_embed: str = 'learned',
                 out_norm: bool = False,
                 pretrain_img_size: Optional[Union[int, Tuple[int,
                                                              int]]] = None,
                 **kwargs):
        arch = self.resolve_arch(arch, embed_dims=embed_dims,
                                 num_layers=num_layers, num_heads=num_heads)
        depth = arch['depth']
        super().__init__(depth, out_indices, **kwargs)
        final_norm = self.conventional('final_norm', final_norm)
        out_type = self.conventional('out_type', out_type)
        norm_cfg = self.conventional('norm_cfg', norm_cfg)
        patch_bias = self.conventional('patch_bias',
                                       patch_bias) and not pre_norm
        for name, value, valid in (
            ('out_type', out_type, self.OUT_TYPES),
            ('patch_embed', patch_embed, ('conv', 'pixel_norm')),
            ('pos_embed', pos_embed, ('learned', 'sincos')),
        ):
            if value not in valid:
                raise ValueError(f'{name} must be one of {valid}, got '
                                 f'{value!r}')
        for name, value in (('with_cls_token', with_cls_token),
                            ('output_cls_token', output_cls_token),
                            ('final_norm', final_norm),
                            ('pre_norm', pre_norm), ('out_norm', out_norm),
                            ('qkv_bias', qkv_bias)):
            check_type(name, value, bool)
        if out_type == 'cls_token' and not with_cls_token:
            raise ValueError("with_cls_token must be True when "
                             "out_type='cls_token'")
        if output_cls_token and not with_cls_token:
            raise InvalidArgument('output_cls_token=True needs with_cls_token')
        for name, value, default in (
                ('layer_cfgs', layer_cfgs or None, None),
                ('layer_scale_init_value', layer_scale_init_value, 0),
                ('num_fcs', num_fcs, 2), ('out_origin', out_origin, False)):
            if value != default:
                raise ValueError(f'{name}={value!r} is not supported')
        img_size = pretrain_input_size(img_size, pretrain_img_size)
        self.embed_dims = embed_dims = arch['embed_dims']
        self.num_layers, self.num_features = depth, [embed_dims] * depth
        self.out_type, self.final_norm = out_type, final_norm
        self.with_cls_token = with_cls_token
        self.output_cls_token = output_cls_token
        self.num_extra_tokens = int(with_cls_token)
        self.out_norm = out_norm
        if mlp_ratio is None:
            mlp_ratio = arch.get('feedforward_channels',
                                 4 * embed_dims) / embed_dims
        self.arch_settings = dict(  # mmpretrain's record of the arch
            embed_dims=embed_dims, num_layers=depth, num_heads=arch[
                'num_heads'], feedforward_channels=int(embed_dims * mlp_ratio))

        if patch_embed == 'conv':
            stem = functools.partial(CornerPatchEmbed, **dict(
                dict(in_channels=in_channels,
                     embed_dims=embed_dims,
                     conv_type='Conv2d',
                     kernel_size=patch_size,
                     stride=patch_size,
                     padding=patch_pad,
                     bias=patch_bias,
                     norm_cfg=norm_cfg if patch_norm else None),
                **(patch_cfg or {})))
        else:
            stem = functools.partial(PixelNormPatchEmbed, in_channels,
                                     embed_dims, patch_size, norm_cfg)
        self.patch_resolution = grid_after_stride(
            to_2tuple_int(img_size, 'img_size'), patch_size)
        self.interpolate_mode = interpolate_mode

        cfgs = resolve_attn_cfgs(attn_cfgs, arch, [1] * depth,
                                 [self.patch_resolution] * depth,
                                 VIT_ATTENTION)
        drop_paths = drop_path_slices(drop_path_rate, [1] * depth)
        if with_cls_token:
            for cfg, in cfgs:
                if not attention_class(cfg['type']).supports('grid_free',
                                                             cfg):
                    raise ValueError(
                        f'with_cls_token=True: {cfg["type"]} works on the '
                        'token grid and cannot take a class token; set '
                        'with_cls_token=False')
        block = functools.partial(
            TransformerBlock, embed_dims, ffn_ratio=mlp_ratio,
            ffn_drop=drop_rate, act_cfg=act_cfg, norm_cfg=norm_cfg)
        norm = functools.partial(norm_layer, norm_cfg, embed_dims)
        self.build(BackboneSpec(
            arch, dict(
                patch_embed=stem,
                cls_token=functools.partial(learned_table, (1, 1, embed_dims))
                if with_cls_token else None,
                # A tensor, as the stock ViTs'.
                pos_embed=functools.partial(learned_table, (
                    1, self.num_extra_tokens +
                    math.prod(self.patch_resolution), embed_dims), std=.02)
                if pos_embed == 'learned' else None,
                drop_after_pos=functools.partial(nn.Dropout, drop_rate),
                pre_norm=norm if pre_norm else None),
            [StageSpec(embed_dims, arch['num_heads'], self.patch_resolution,
                       cfgs[i], drop_paths[i], block, qkv_bias=qkv_bias,
                       settings=dict(attn_drop=attn_drop_rate,
                                     proj_drop=drop_rate))
             for i in range(depth)],
            self.out_indices,
            functools.partial(strided_grid_sides, (patch_size, ) * depth),
            output_norm=functools.partial(norm_layer, norm_cfg)
            if out_norm else None,
            head=dict(ln1=norm if final_norm else None,
                      ln2=norm if not out_norm and out_type == 'avg_featmap'
                      else None)))
        self.apply(self._init_weights)
        if with_cls_token:
            trunc_normal_(self.cls_token, std=.02)
        if 'all' not in frozen_exclude:
            # mmseg's: freeze everything but the excluded names.
            for name, param in self.named_parameters():
                if not any(exclude in name for exclude in frozen_exclude):
                    param.requires_grad = False

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        init_linear_and_norm(module)

    @property
    def layers(self) -> ModuleList:
        """The blocks in order, as mmpretrain's and mmseg's ``layers``
        (each stage of a plain ViT holds one)."""
        return ModuleList(stage.blocks[0] for stage in self.stages)

    @staticmethod
    def resize_pos_embed(pos_embed: torch.Tensor, input_shape: Grid,
                         pos_shape: Grid, mode: str) -> torch.Tensor:
        """mmseg's ``VisionTransformer.resize_pos_embed``: a ``(1, E +
        pos_h * pos_w, C)`` table learned on ``pos_shape`` resized to the
        grid ``input_shape``, its ``E`` leading (class-token) rows kept.

        Args:
            pos_embed (Tensor): The table.
            input_shape (tuple[int, int]): The grid to resize to.
            pos_shape (tuple[int, int]): The grid it was learned on.
            mode (str): ``F.interpolate`` mode.

        Returns:
            Tensor: The ``(1, E + h * w, C)`` table.
        """
        if pos_embed.ndim != 3:
            raise InvalidArgument('shape of pos_embed must be [B, L, C], '
                                  f'got {tuple(pos_embed.shape)}')
        extra = pos_embed.shape[1] - pos_shape[0] * pos_shape[1]
        return resize_pos_embed(pos_embed, tuple(pos_shape),
                                tuple(input_shape), mode,
                                num_extra_tokens=extra)

    # ----------------------------------------------------------- forward
    def forward_stem(self, x: torch.Tensor):
        x, hw_shape = self.patch_embed(x)
        if self.pos_embed is None:
            # Fixed positions for the grid only: a class token gets none,
            # as in MAE's sin-cos embedding.
            x = x + sincos_pos_embed_2d(hw_shape, self.embed_dims,
                                        device=x.device).to(x.dtype)
        if self.with_cls_token:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1)
        if self.pos_embed is not None:
            x = x + resize_pos_embed(
                self.pos_embed, self.patch_resolution, hw_shape,
                self.interpolate_mode, self.num_extra_tokens).to(x.dtype)
        x = self.drop_after_pos(x)
        if self.pre_norm is not None:
            x = self.pre_norm(x)
        return x, hw_shape

    def close_stage(self, index: int, x: torch.Tensor) -> torch.Tensor:
        if index == self.num_stages - 1 and self.final_norm:
            return self.ln1(x)
        return x

    def format_output(self, index: int, x: torch.Tensor, hw_shape):
        norm = getattr(self, f'norm{index}', None)
        if norm is not None and self.out_type != 'avg_featmap':
            x = norm(x)
        if self.out_type == 'raw':
            return x
        if self.out_type == 'cls_token':
            return x[:, 0]
        patches = x[:, self.num_extra_tokens:]
        if self.out_type == 'avg_featmap':
            return (norm if norm is not None else self.ln2)(patches.mean(1))
        out = nlc_to_nchw(patches, hw_shape)
        return [out, x[:, 0]] if self.output_cls_token else out

    def stem_modules(self):
        return [m for m in (self.patch_embed, self.pre_norm) if m is not None]

    def stem_parameters(self):
        return [p for p in (getattr(self, 'cls_token', None), self.pos_embed)
                if p is not None]

    def final_modules(self):
        return [norm for norm in (self.ln1, self.ln2) if norm is not None]

    # ----------------------------------------------------------- weights
    def position_tables(self):
        tables = super().position_tables()
        if self.pos_embed is not None:
            tables['pos_embed'] = (self.patch_resolution,
                                   self.interpolate_mode,
                                   self.num_extra_tokens)
        return tables

    @staticmethod
    def convert_official_keys(state_dict: StateDict,
                              block_attention) -> StateDict:
        """See :func:`convert_simple_vit` (every block converts alike)."""
        return convert_simple_vit(state_dict)

    def migrate_layout(self, state_dict: StateDict) -> StateDict:
        """mmpretrain's and mmseg's layouts -> ours.

        ``layers.{i}`` (both) -> ``stages.{i}.blocks.0`` with ``ln1`` /
        ``ln2`` -> ``norm1`` / ``norm2``, mmseg's fused attention
        (``attn.attn.in_proj_*``, ``attn.attn.out_proj``) -> ``attn.qkv``,
        ``attn.proj``; ``pos_embed`` (a class-token row dropped without a
        class token), mmseg's ``ln_pre`` -> ``pre_norm``.
        """
        migrated = OrderedDict()
        for key, value in state_dict.items():
            key = re.sub(r'^layers\.(\d+)\.ln([12])\.',
                         r'stages.\1.blocks.0.norm\2.', key)
            key = re.sub(r'^layers\.(\d+)\.', r'stages.\1.blocks.0.', key)
            key = re.sub(r'\.attn\.attn\.in_proj_', '.attn.qkv.', key)
            key = re.sub(r'\.attn\.attn\.out_proj\.', '.attn.proj.', key)
            key = re.sub(r'^ln_pre\.', 'pre_norm.', key)
            migrated[key] = value
        if not self.with_cls_token:
            # Stock files hold a class token (and its position) even where
            # it is not used (mmseg's with_cls_token=False).
            migrated.pop('cls_token', None)
            pos = migrated.get('pos_embed')
            if pos is not None and pos.dim() == 3:
                n = pos.shape[1]
                if math.isqrt(n - 1)**2 == n - 1 and math.isqrt(n)**2 != n:
                    migrated['pos_embed'] = pos[:, 1:]
        return migrated


def convert_simple_vit(state_dict: StateDict) -> StateDict:
    """Official Simple ViT keys (lucidrains' layout, MSF's release
    tk1980/MSFtransformer) -> ours; other layouts pass through.

    ``to_patch_embedding.{1,2,3}`` -> ``patch_embed.{pixel_norm,
    projection,norm}``; ``transformer.layers.{i}.0`` (attention: ``norm``,
    ``to_qkvp`` / ``to_qkv``, ``to_out``) ->
    ``stages.{i}.blocks.0.{norm1,attn.qkv,attn.proj}``;
    ``transformer.layers.{i}.1.net.{0,1,3}`` ->
    ``stages.{i}.blocks.0.{norm2,ffn.layers.0.0,ffn.layers.1}``; the head's
    norm ``linear_head.0`` (applied to the mean token) -> the last block's
    output norm; ``linear_head.1`` -> ``head.fc``, left for the classifier.
    """
    layer_ids = [
        int(m.group(1)) for m in (
            re.match(r'transformer\.layers\.(\d+)\.', k)
            for k in state_dict) if m
    ]
    if not layer_ids:
        return state_dict
    block = {r'0\.norm': 'norm1', r'0\.to_qkvp?': 'attn.qkv',
             r'0\.to_out': 'attn.proj', r'1\.net\.0': 'norm2',
             r'1\.net\.1': 'ffn.layers.0.0', r'1\.net\.3': 'ffn.layers.1'}
    renames = [
        (r'to_patch_embedding\.1\.', 'patch_embed.pixel_norm.'),
        (r'to_patch_embedding\.2\.', 'patch_embed.projection.'),
        (r'to_patch_embedding\.3\.', 'patch_embed.norm.'),
        *((rf'transformer\.layers\.(\d+)\.{old}\.',
           rf'stages.\1.blocks.0.{new}.') for old, new in block.items()),
        (r'linear_head\.0\.', f'norm{max(layer_ids)}.'),
        (r'linear_head\.1\.', 'head.fc.'),
    ]
    converted = OrderedDict()
    for key, value in state_dict.items():
        for pattern, replacement in renames:
            key, found = re.subn('^' + pattern, replacement, key)
            if found:
                break
        converted[key] = value
    return converted


#: ViT families without a class token: their outputs by package (feature
#: maps; the mean token in mmpretrain, whose classifiers read a vector).
NO_CLS_TOKEN_CONVENTIONS = {
    None: dict(AttnViT.conventions[None], out_type='featmap'),
    'mmpretrain': dict(out_type='avg_featmap'),
}
