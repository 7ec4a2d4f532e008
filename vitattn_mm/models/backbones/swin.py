"""One Swin skeleton for every attention: mmpretrain's ``SwinTransformer``
with the attention of each stage taken from the config.

A stage either keeps Swin's shifted-window blocks, with any registered
*window* attention inside mmpretrain's ``ShiftWindowMSA`` (Swin's own
``WindowMSA``, MSF's :class:`MeanShiftAttention`), or is made of the shared
pre-norm :class:`TransformerBlock` around any registered *token* attention
(FLatten's :class:`FocusedLinearAttention`, ...). Everything else is
mmpretrain's: patch embedding, patch merging after each stage, output norms
``norm{i}``, ``frozen_stages`` as mmdet and mmpretrain mean it, layer-wise
depth for learning-rate decay, relative-position-bias resizing on load.

mmdet's Swin keyword names (``embed_dims``, ``depths``, ``num_heads``,
``mlp_ratio``, ``strides``, ``convert_weights``, ...) are accepted too, so
an mmdet or mmseg Swin config works after changing only ``type``.
"""
import re
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmengine.model import ModuleList
from mmengine.model.weight_init import trunc_normal_
from mmpretrain.models.backbones import SwinTransformer
from mmpretrain.models.utils import resize_pos_embed
from mmpretrain.models.utils.attention import WindowMSA

from ...registry import ATTENTIONS, register_model
from ..layers import (LinspaceOnCPU, StateDict, TransformerBlock,
                      VitAttnBackbone, attention_class, build_attention,
                      freeze_module, grid_after_stride, init_linear_and_norm,
                      linear_drop_path_rates, migrate_conv1x1_ffn,
                      per_block_attention, per_stage_attention,
                      to_2tuple_int)

ATTENTIONS.register_module(name='WindowMSA', module=WindowMSA)


#: The window attention of a stage that names none: Swin's.
SWIN_ATTENTION = dict(type='ShiftWindowMSA', window_msa='WindowMSA')


@register_model
class AttnSwinTransformer(VitAttnBackbone, SwinTransformer):
    """Swin Transformer whose attention is chosen per stage.

    Args:
        arch (str | dict): 'tiny', 'small', 'base', 'large' (or 't', 's',
            'b', 'l'), or a dict with ``embed_dims`` (int), ``depths`` and
            ``num_heads`` (one per stage). Default: 'tiny'.
        attn_cfgs (dict | Sequence[dict | None], optional): Attention of
            every stage (a dict) or of each stage (a list; None is Swin's).
            ``dict(type='ShiftWindowMSA', window_msa=NAME, **kwargs)`` keeps
            Swin's shifted windows around the registered window attention
            NAME; any other ``type`` names a registered token attention
            that the stage's :class:`TransformerBlock` s run over the whole
            map; a list of such dicts gives each block of the stage its own.
            Default: None (Swin everywhere).
        pretrain_img_size (int | tuple[int, int]): Input size of the
            pretrained weights: sizes absolute position embeddings and the
            grid token attentions learn positional encodings on.
            Default: 224.
        in_channels (int): Input channels. Default: 3.
        patch_size (int): Stem patch size. Default: 4.
        window_size (int): Window of the shifted-window stages. Default: 7.
        mlp_ratio (float): FFN hidden channels / C. Default: 4.
        qkv_bias (bool): Bias in the attention projections. Default: True.
        drop_rate (float): Dropout after the patch embedding. Default: 0.
        drop_path_rate (float): Stochastic depth rate. Default: 0.1.
        out_indices (Sequence[int] | int): Output stages, each through its
            own norm ``norm{i}``. Default: (0, 1, 2, 3).
        use_abs_pos_embed (bool): Learned absolute position embedding.
            Default: False.
        pad_small_map (bool): Shifted-window stages pad maps smaller than
            the window (dense prediction). False follows the official
            classifiers (a map equal to the window is not shifted) and needs
            maps of at least one window. Default: True.
        act_cfg (dict): FFN activation. Default: ``dict(type='GELU')``.
        norm_cfg (dict): Norm layers. Default: ``dict(type='LN')``.
        with_cp (bool): Gradient checkpointing per block. Default: False.
        frozen_stages (int): Freeze the patch embedding and stages
            ``0..frozen_stages`` with the patch merging after each and
            their output norms (as mmdet and mmpretrain); -1: none.
            Default: -1.
        norm_eval (bool): Keep BatchNorm in eval mode. Default: False.
        init_cfg (dict, optional): ``dict(type='Pretrained', checkpoint=...)``
            loads weights (official layouts converted). Default: None.
        embed_dims, depths, num_heads: mmdet's names for the arch; given,
            they override the named arch's values. Default: None.
        strides (Sequence[int]): mmdet's stage strides; only Swin's
            ``(patch_size, 2, 2, 2)`` is supported. Default: None.
        patch_norm (bool): mmdet's switch; only True. Default: True.
        qk_scale (float, optional): mmdet's; only None. Default: None.
        attn_drop_rate (float): Attention dropout of Swin's ``WindowMSA``
            stages. Default: 0.
        convert_weights (bool): mmdet's switch for official Swin files;
            accepted, official layouts are always detected. Default: False.
        pretrained (str, optional): Deprecated, as in mmdet: a checkpoint
            to load through ``init_cfg``. Default: None.
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

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 attn_cfgs: Optional[Union[dict, Sequence]] = None,
                 pretrain_img_size: Union[int, Tuple[int, int]] = 224,
                 in_channels: int = 3,
                 patch_size: int = 4,
                 window_size: int = 7,
                 mlp_ratio: float = 4.,
                 qkv_bias: bool = True,
                 drop_rate: float = 0.,
                 drop_path_rate: float = 0.1,
                 out_indices: Union[int, Sequence[int]] = (0, 1, 2, 3),
                 use_abs_pos_embed: bool = False,
                 pad_small_map: bool = True,
                 act_cfg: dict = dict(type='GELU'),
                 norm_cfg: dict = dict(type='LN'),
                 with_cp: bool = False,
                 frozen_stages: int = -1,
                 norm_eval: bool = False,
                 init_cfg: Optional[dict] = None,
                 embed_dims: Optional[int] = None,
                 depths: Optional[Sequence[int]] = None,
                 num_heads: Optional[Sequence[int]] = None,
                 strides: Optional[Sequence[int]] = None,
                 patch_norm: bool = True,
                 qk_scale: Optional[float] = None,
                 attn_drop_rate: float = 0.,
                 convert_weights: bool = False,
                 pretrained: Optional[str] = None):
        arch = self.resolve_arch(arch, embed_dims, depths, num_heads)
        num_stages = len(arch['depths'])
        if strides is not None and tuple(strides) != (
                patch_size, ) + (2, ) * (num_stages - 1):
            raise ValueError(f'strides {tuple(strides)}: Swin merges 2x2 '
                             f'patches, so only ({patch_size}, 2, 2, ...) '
                             'is supported')
        if not patch_norm or qk_scale is not None:
            raise ValueError('patch_norm=False and qk_scale are not '
                             'supported (Swin uses neither)')
        if pretrained is not None:
            if init_cfg is not None:
                raise ValueError('give init_cfg or pretrained, not both')
            init_cfg = dict(type='Pretrained', checkpoint=pretrained)
        stage_attn = per_stage_attention(attn_cfgs, num_stages, SWIN_ATTENTION)
        out_indices = self.normalize_out_indices(out_indices, num_stages)
        img_size = to_2tuple_int(pretrain_img_size)

        stage_cfgs = []
        for cfg in stage_attn:
            downsample = dict(downsample_cfg=dict(norm_cfg=norm_cfg))
            if self.is_window_attention(cfg):
                window = dict(cfg)
                window.pop('type')
                window_msa = attention_class(
                    window.pop('window_msa', 'WindowMSA'))
                if attn_drop_rate:
                    window.setdefault('attn_drop', attn_drop_rate)
                attn = dict(window_msa=window_msa, qkv_bias=qkv_bias,
                            **window)
                stage_cfgs.append(
                    dict(block_cfgs=dict(
                        ffn_ratio=mlp_ratio,
                        attn_cfgs=attn,
                        ffn_cfgs=dict(act_cfg=act_cfg),
                        norm_cfg=norm_cfg), **downsample))
            else:
                # Blocks are added below; mmpretrain builds the merging.
                stage_cfgs.append(dict(depth=0, **downsample))
        with LinspaceOnCPU():
            SwinTransformer.__init__(
                self,
                arch=arch,
                img_size=img_size,
                patch_size=patch_size,
                in_channels=in_channels,
                window_size=window_size,
                drop_rate=drop_rate,
                drop_path_rate=drop_path_rate,
                out_indices=out_indices,
                use_abs_pos_embed=use_abs_pos_embed,
                with_cp=with_cp,
                frozen_stages=frozen_stages,
                norm_eval=norm_eval,
                pad_small_map=pad_small_map,
                norm_cfg=norm_cfg,
                stage_cfgs=stage_cfgs,
                init_cfg=init_cfg)

        grid = grid_after_stride(img_size, patch_size)
        rates = linear_drop_path_rates(drop_path_rate, sum(self.depths))
        for i, cfg in enumerate(stage_attn):
            if i > 0:
                grid = grid_after_stride(grid, 2)
            if self.is_window_attention(cfg):
                continue
            dims = self.embed_dims * 2**i
            first = sum(self.depths[:i])
            block_cfgs = per_block_attention(cfg, self.depths[i], i)
            self.stages[i].blocks = ModuleList([
                TransformerBlock(
                    dims,
                    build_attention(
                        block_cfgs[j],
                        embed_dims=dims,
                        num_heads=self.num_heads[i],
                        qkv_bias=qkv_bias,
                        context=dict(grid_size=grid)),
                    ffn_ratio=mlp_ratio,
                    drop_path=rates[first + j],
                    act_cfg=act_cfg,
                    norm_cfg=norm_cfg,
                    with_cp=with_cp) for j in range(self.depths[i])
            ])

        # Every stage's tokens must cover at least one pixel of the input;
        # shifted-window stages without padding need a whole window.
        strides_px = [patch_size * 2**i for i in range(num_stages)]
        self.min_input_size = strides_px[-1]
        if not pad_small_map:
            for stride, cfg in zip(strides_px, stage_attn):
                if self.is_window_attention(cfg):
                    self.min_input_size = max(self.min_input_size,
                                              stride * (window_size - 1) + 1)
        self._register_load_state_dict_pre_hook(self._migrate_on_load)
        self.apply(self._init_weights)

    # ------------------------------------------------------------ config
    @classmethod
    def resolve_arch(cls,
                     arch: Union[str, dict],
                     embed_dims: Optional[int] = None,
                     depths: Optional[Sequence[int]] = None,
                     num_heads: Optional[Sequence[int]] = None) -> dict:
        """The arch settings, mmdet's keyword names overriding ``arch``."""
        settings = cls.parse_arch(arch)
        for key, value in (('embed_dims', embed_dims), ('depths', depths),
                           ('num_heads', num_heads)):
            if value is not None:
                settings[key] = value if key == 'embed_dims' else list(value)
        settings = {k: settings[k] for k in cls.arch_keys}
        cls.check_per_stage(settings)
        return settings

    @staticmethod
    def is_window_attention(cfg: Union[dict, list]) -> bool:
        return isinstance(cfg, dict) and cfg['type'] == 'ShiftWindowMSA'

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        init_linear_and_norm(module)
        if isinstance(module, WindowMSA):
            trunc_normal_(module.relative_position_bias_table, std=.02)

    # ----------------------------------------------------------- forward
    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        return self.forward_stages(x)[0]

    def forward_stages(self, x: torch.Tensor) -> Tuple[tuple, dict]:
        """mmpretrain's Swin forward pass with every block run through
        :meth:`forward_block`; returns the outputs and the state the blocks
        passed along."""
        self.check_input_size(x)
        x, hw_shape = self.patch_embed(x)
        if self.use_abs_pos_embed:
            x = x + resize_pos_embed(
                self.absolute_pos_embed, self.patch_resolution, hw_shape,
                self.interpolate_mode, self.num_extra_tokens)
        x = self.drop_after_pos(x)
        outs, state = [], {}
        for i, stage in enumerate(self.stages):
            for j, block in enumerate(stage.blocks):
                x = self.forward_block(block, x, hw_shape, state, i, j)
            if i in self.out_indices:
                out = getattr(self, f'norm{i}')(x)
                outs.append(
                    out.view(-1, *hw_shape, self.num_features[i]).permute(
                        0, 3, 1, 2).contiguous())
            if stage.downsample is not None:
                x, hw_shape = stage.downsample(x, hw_shape)
        return tuple(outs), state

    def _freeze_stages(self) -> None:
        SwinTransformer._freeze_stages(self)
        # mmpretrain only stops the output norms' gradients.
        for i in self.out_indices:
            if i <= self.frozen_stages:
                freeze_module(getattr(self, f'norm{i}'))

    # ----------------------------------------------------------- weights
    @classmethod
    def convert_checkpoint(cls, state_dict: StateDict) -> StateDict:
        """Keys written before the skeleton -> today's (see
        :func:`migrate_legacy_swin_keys`)."""
        migrated = dict(state_dict)
        migrate_legacy_swin_keys(migrated)
        return state_dict if migrated.keys() == state_dict.keys() \
            else migrated

    def _migrate_on_load(self, state_dict, prefix, *args, **kwargs):
        migrate_legacy_swin_keys(state_dict, prefix)


def migrate_legacy_swin_keys(state_dict: dict, prefix: str = '') -> None:
    """Rename, in place, the keys the Swin backbones wrote before they
    shared this skeleton.

    * MSF-Swin: ``downsamples.{i}`` -> ``stages.{i}.downsample``,
      ``stages.{i}.{j}`` -> ``stages.{i}.blocks.{j}``;
    * FLatten-Swin: the patch merging sat before its stage
      (``stages.{i}.downsample`` -> ``stages.{i-1}.downsample``) and the
      FLatten blocks' FFN was two 1x1 convs (now mmcv's Linear ``FFN``).
    """
    p = re.escape(prefix)
    keys = list(state_dict)
    merging_before_stage = (
        any(k.startswith(f'{prefix}stages.1.downsample.') for k in keys)
        and not any(k.startswith(f'{prefix}stages.0.downsample.')
                    for k in keys))
    for key in keys:
        new = re.sub(rf'^{p}downsamples\.(\d+)\.',
                     lambda m: f'{prefix}stages.{m.group(1)}.downsample.', key)
        new = re.sub(rf'^{p}stages\.(\d+)\.(\d+)\.',
                     rf'{prefix}stages.\1.blocks.\2.', new)
        if merging_before_stage:
            new = re.sub(
                rf'^{p}stages\.(\d+)\.downsample\.', lambda m:
                f'{prefix}stages.{int(m.group(1)) - 1}.downsample.', new)
        if new != key:
            state_dict[new] = state_dict.pop(key)
    migrate_conv1x1_ffn(state_dict, prefix)
