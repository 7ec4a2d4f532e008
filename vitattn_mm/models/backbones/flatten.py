"""FLatten Transformer: focused linear attention in DeiT, Swin, PVT, PVTv2
and CSwin.

Han et al., "FLatten Transformer: Vision Transformer using Focused Linear
Attention", ICCV 2023 (https://arxiv.org/abs/2308.00442). The official
repository (LeapLabTHU/FLatten-Transformer) is classification only. The
attention is :class:`~vitattn_mm.models.attentions.FocusedLinearAttention`;
this file holds the released models' arch zoos, where the attention goes
(the plan) and how the official blocks' tensors convert. What dense
prediction adds is the skeletons': any input size, NCHW multi-scale
outputs, and the official files loading through every loader.
"""
import re
from dataclasses import dataclass
from typing import Optional, Sequence, Union

import torch

from ...registry import register_model
from ..checkpoint.pretrained import StateDict
from ..checkpoint.adapt import register_block_converter
from .base_backbone import family_attn_cfgs
from .cswin import AttnCSwinTransformer
from .pvt import AttnPVT, AttnPVTv2, convert_pvt_block
from .swin import AttnSwinTransformer
from .vit import NO_CLS_TOKEN_CONVENTIONS, AttnViT


def focused_linear(focusing_factor: float, kernel_size: int,
                   **kwargs) -> dict:
    """The config of the focused linear attention of a FLatten model."""
    return dict(type='FocusedLinearAttention',
                focusing_factor=focusing_factor, kernel_size=kernel_size,
                **kwargs)


@dataclass(frozen=True)
class LeadingStagesPlan:
    """The plan of FLatten's hierarchical models (an ``attn_cfgs`` callable,
    ``plan(arch, grids)``): ``attention`` in the first
    ``num_flatten_stages`` stages, the skeleton's own attention in the
    others. With ``window_size`` the FLatten stages run in unshifted
    windows of that size, each clipped to the stage's pretraining grid as
    in the official code (56 gives 56 in stage 1 and 28 in stage 2 at
    224).

    Args:
        attention (dict): The FLatten attention's config.
        num_flatten_stages (int): Leading stages that take it.
        window_size (int, optional): Their window; None attends over the
            whole map. Default: None.
    """
    attention: dict
    num_flatten_stages: int
    window_size: Optional[int] = None

    def __call__(self, arch: dict, grids: list) -> list:
        num_stages, count = len(arch['depths']), self.num_flatten_stages
        if not 0 <= count <= num_stages:
            raise ValueError(f'num_flatten_stages must be in 0..{num_stages}'
                             f', got {count}')
        stages = [self.attention] * count + [None] * (num_stages - count)
        if self.window_size is not None:
            for i in range(count):
                stages[i] = dict(
                    self.attention, type='WindowedAttention',
                    window_msa=self.attention['type'], shift=False,
                    window_size=tuple(min(self.window_size, g)
                                      for g in grids[i]))
        return stages


@register_model
class FLattenSwinTransformer(AttnSwinTransformer):
    """FLatten-Swin: focused linear attention in the first Swin stages.

    :class:`AttnSwinTransformer` with :class:`FocusedLinearAttention` in
    stages ``< num_flatten_stages`` (no shift, no relative position bias)
    and Swin's shifted-window attention in the others. By default the
    FLatten stages attend over the whole unpadded map, their positional
    encodings resized from the pretraining grid (at 224 the official
    model's 56x56 "window" is the whole stage-1 map);
    ``flatten_window_size`` keeps fixed windows instead, each clipped to
    the stage's pretraining grid as in the official code (56 gives 56 in
    stage 1 and 28 in stage 2 at 224).

    Args:
        arch (str | dict): 'tiny', 'small', 'base' (or 't', 's', 'b'), or a
            dict with keys ``embed_dims`` (int), ``depths`` and
            ``num_heads`` (one per stage). Default: 'tiny'.
        num_flatten_stages (int): Leading stages with focused linear
            attention. Default: 2.
        flatten_window_size (int, optional): Window of the FLatten stages;
            None attends over the whole map. Default: None.
        focusing_factor (float): p of the focusing function. Default: 3.
        kernel_size (int): Depthwise conv kernel of the FLatten attention.
            Default: 5.
        **kwargs: :class:`AttnSwinTransformer` arguments
            (``pretrain_img_size``, ``window_size``, ``mlp_ratio``,
            ``drop_path_rate``, ``out_indices``, ``pad_small_map``,
            ``with_cp``, ``frozen_stages``, ``init_cfg``, mmdet's and
            mmpretrain's names...).
    """
    converter_command = 'tools/model_converters/flatten2vitattn.py'
    arch_zoo = {
        key: AttnSwinTransformer.arch_zoo[key]
        for key in (('t', 'tiny'), ('s', 'small'), ('b', 'base'))
    }

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 num_flatten_stages: int = 2,
                 flatten_window_size: Optional[int] = None,
                 focusing_factor: float = 3,
                 kernel_size: int = 5,
                 **kwargs):
        kwargs['attn_cfgs'] = family_attn_cfgs(
            type(self), kwargs, LeadingStagesPlan(
                focused_linear(focusing_factor, kernel_size),
                num_flatten_stages, flatten_window_size))
        super().__init__(arch=arch, **kwargs)


@register_model
class FLattenPVT(AttnPVT):
    """FLatten-PVT: PVT with focused linear attention in every block.

    :class:`AttnPVT` with :class:`FocusedLinearAttention` (spatial reduction
    ``sr_ratios``; 1 in every released model, so the attention is global).
    Unlike mmdet's PVT, partial patches are padded (``paddings='corner'``)
    and every output gets a LayerNorm (``out_norm``) for dense prediction:
    PVT has no norm between stages and its official classifier pools the
    raw last stage.

    Args:
        arch (str | dict): 'tiny', 'small', 'medium', 'large' (or 't', 's',
            'm', 'l'), or a dict with ``embed_dims``, ``depths``,
            ``num_heads`` and ``mlp_ratios`` (one per stage).
            Default: 'tiny'.
        focusing_factor (float): p of the focusing function. Default: 3.
        kernel_size (int): Depthwise conv kernel of the attention.
            Default: 5.
        sr_ratios (Sequence[int]): Spatial reduction per stage (none in
            the released models). Default: (1, 1, 1, 1).
        paddings (Sequence[int | str]): Patch embedding paddings.
            Default: ('corner', ) * 4.
        out_norm (bool): A LayerNorm on every output. Default: True.
        patch_norm_cfg (dict): Norm of the patch embeddings.
            Default: ``dict(type='LN')``.
        **kwargs: :class:`AttnPVT` arguments (mmdet's ``num_layers``,
            ``embed_dims`` ..., ``pretrain_img_size``, ``drop_path_rate``,
            ``out_indices``, ``with_cp``, ``frozen_stages``,
            ``init_cfg``...).
    """
    converter_command = 'tools/model_converters/flatten2vitattn.py'

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 focusing_factor: float = 3,
                 kernel_size: int = 5,
                 sr_ratios: Sequence[int] = (1, 1, 1, 1),
                 paddings: Sequence[Union[int, str]] = ('corner', ) * 4,
                 out_norm: bool = True,
                 patch_norm_cfg: dict = dict(type='LN'),
                 **kwargs):
        kwargs['attn_cfgs'] = family_attn_cfgs(
            type(self), kwargs, focused_linear(focusing_factor, kernel_size))
        super().__init__(arch=arch, sr_ratios=sr_ratios, paddings=paddings,
                         out_norm=out_norm, patch_norm_cfg=patch_norm_cfg,
                         **kwargs)


@register_model
class FLattenPVTv2(FLattenPVT, AttnPVTv2):
    """FLatten-PVTv2: PVTv2 with focused linear attention in every block.

    :class:`AttnPVTv2` (overlapping patch embeddings, a depthwise conv in
    every FFN, a norm closing every stage) with
    :class:`FocusedLinearAttention`. Arguments as :class:`FLattenPVT`; arch
    'b0' ... 'b4', PVTv2's overlapping patch embeddings' paddings
    (default (3, 1, 1, 1)) and no output norm by default (each stage's
    closing norm is one).
    """

    def __init__(self,
                 arch: Union[str, dict] = 'b0',
                 paddings: Sequence[Union[int, str]] = (3, 1, 1, 1),
                 out_norm: bool = False,
                 **kwargs):
        super().__init__(arch=arch, paddings=paddings, out_norm=out_norm,
                         **kwargs)


@register_model
class FLattenCSwinTransformer(AttnCSwinTransformer):
    """FLatten-CSwin: focused linear attention in the first CSwin stages.

    :class:`AttnCSwinTransformer` with :class:`FocusedLinearAttention`
    (with CSwin's LePE, ``lepe=True``) over the whole map in stages
    ``< num_flatten_stages``, and CSwin's cross-shaped windows in the
    others (the last one over the whole map). The official model runs its
    FLatten stages as one "stripe" as large as the 224x224 map (split sizes
    56 and 28), which is global attention: here it is global at any size,
    the positional encodings resized from the pretraining grid.

    Args:
        arch (str | dict): 'tiny', 'small', 'base' (or 't', 's', 'b'), or a
            dict with ``embed_dims`` (int), ``depths`` and ``num_heads``
            (one per stage). Default: 'tiny'.
        num_flatten_stages (int): Leading stages with focused linear
            attention. Default: 2.
        focusing_factor (float): p of the focusing function. Default: 3.
        kernel_size (int): Depthwise conv kernel of the FLatten attention.
            Default: 5.
        **kwargs: :class:`AttnCSwinTransformer` arguments
            (``split_sizes``, ``pretrain_img_size``, ``drop_path_rate``,
            ``out_indices``, ``with_cp``, ``frozen_stages``, ``init_cfg``...).
    """
    converter_command = 'tools/model_converters/flatten2vitattn.py'
    arch_zoo = {
        ('t', 'tiny'):
        dict(embed_dims=64, depths=[2, 4, 18, 1], num_heads=[2, 4, 8, 16]),
        ('s', 'small'):
        dict(embed_dims=64, depths=[2, 4, 32, 2], num_heads=[2, 4, 8, 16]),
        ('b', 'base'):
        dict(embed_dims=96, depths=[3, 6, 29, 2], num_heads=[4, 8, 16, 32]),
    }

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 num_flatten_stages: int = 2,
                 focusing_factor: float = 3,
                 kernel_size: int = 5,
                 **kwargs):
        kwargs['attn_cfgs'] = family_attn_cfgs(
            type(self), kwargs, LeadingStagesPlan(
                focused_linear(focusing_factor, kernel_size, lepe=True),
                num_flatten_stages))
        super().__init__(arch=arch, **kwargs)


@register_model
class FLattenDeiT(AttnViT):
    """FLatten-DeiT: DeiT with focused linear attention in every block.

    :class:`AttnViT` in DeiT's layout (a stride-16 conv patch embedding, a
    learned absolute position embedding, pre-norm blocks with LayerNorm eps
    1e-6 and a 4x MLP) with a global :class:`FocusedLinearAttention` in
    every block (supplement Table 2: 12 blocks, 192 channels, 3 heads, a
    14x14 "window" that is the whole 224x224 map). Each attention's learned
    positional encoding is sized for the pretraining grid (14x14 at 224)
    and resized bilinearly to the running grid, as in the other FLatten
    models; the position embedding is resized the same way.

    The focused linear attention works on the token grid, so there is no
    class token: each output has its norm (``norm{i}``), and the classifier
    pools the mean token through the last one (``out_type='avg_featmap'``,
    the default in mmpretrain configs) where DeiT reads its class token.
    The official repository released no FLatten-DeiT code or weights, so
    there is no official layout to convert.

    Args:
        arch (str | dict): The paper's 'tiny' (or 't', 'ti', 'deit-tiny',
            'deit-t'), any other name of :class:`AttnViT` (mmpretrain's,
            e.g. 'b'), or a dict with ``embed_dims``, ``depth`` and
            ``num_heads``. Default: 'tiny'.
        focusing_factor (float): p of the focusing function. Default: 3.
        kernel_size (int): Depthwise conv kernel of the attention.
            Default: 5.
        with_cls_token (bool): No class token (the attention works on the
            token grid). Default: False.
        final_norm (bool): Default: False (each output has its own norm).
        out_norm (bool): A LayerNorm on every output. Default: True.
        norm_cfg (dict): Default: ``dict(type='LN', eps=1e-6)`` (DeiT's).
        patch_bias (bool): Bias of the patch embedding. Default: True.
        interpolate_mode (str): How the position embedding is resized.
            Default: 'bilinear'.
        **kwargs: :class:`AttnViT` arguments (``patch_size``, ``img_size``,
            ``qkv_bias``, ``out_indices``, ``out_type``,
            ``drop_path_rate``, ``with_cp``, ``frozen_stages``,
            ``init_cfg``...).
    """
    arch_zoo = {
        ('t', 'ti', 'tiny', 'deit-t', 'deit-tiny'):
        dict(embed_dims=192, depth=12, num_heads=3),
    }
    conventions = NO_CLS_TOKEN_CONVENTIONS

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 focusing_factor: float = 3,
                 kernel_size: int = 5,
                 with_cls_token: bool = False,
                 final_norm: bool = False,
                 out_norm: bool = True,
                 norm_cfg: dict = dict(type='LN', eps=1e-6),
                 patch_bias: bool = True,
                 interpolate_mode: str = 'bilinear',
                 **kwargs):
        kwargs['attn_cfgs'] = family_attn_cfgs(
            type(self), kwargs, focused_linear(focusing_factor, kernel_size))
        super().__init__(
            arch=arch, with_cls_token=with_cls_token, final_norm=final_norm,
            out_norm=out_norm, norm_cfg=norm_cfg, patch_bias=patch_bias,
            interpolate_mode=interpolate_mode, **kwargs)


# ------------------------------------------------ official block converters
@register_block_converter('swin', 'FocusedLinearAttention')
@register_block_converter('pvt', 'FocusedLinearAttention')
def convert_flatten_block(prefix: str, name: str, value: torch.Tensor,
                          conv_ffn: bool = False) -> StateDict:
    """One tensor of an official FLatten-Swin / PVT / PVTv2 block -> ours
    (``prefix`` + our name).

    Swin's fused ``attn.qkv`` becomes ``attn.q`` (first C rows) and
    ``attn.kv``; the learned encoding a parameter of its module; the MLP as
    in PVT's blocks (:func:`~vitattn_mm.models.backbones.pvt.convert_pvt_block`).
    """
    if name.startswith('attn.qkv.'):
        q, kv = value.split([value.shape[0] // 3, value.shape[0] // 3 * 2])
        suffix = name[len('attn.qkv.'):]
        return {
            f'{prefix}attn.q.{suffix}': q,
            f'{prefix}attn.kv.{suffix}': kv
        }
    if name == 'attn.positional_encoding':
        return {f'{prefix}attn.positional_encoding.weight': value}
    return convert_pvt_block(prefix, name, value, conv_ffn)


@register_block_converter('cswin', 'FocusedLinearAttention')
def convert_flatten_cswin_block(prefix: str, name: str,
                                value: torch.Tensor) -> StateDict:
    """One tensor of an official FLatten-CSwin block -> ours: the block's
    ``qkv`` / ``proj`` are the attention's, ``attns.0.get_v`` its LePE
    (``attn.lepe``) and ``attns.0.*`` the rest of it."""
    for pattern, repl in ((r'(qkv|proj)\.', r'attn.\1.'),
                          (r'attns\.0\.get_v\.', 'attn.lepe.'),
                          (r'attns\.0\.', 'attn.')):
        name, found = re.subn('^' + pattern, repl, name)
        if found:
            break
    return convert_flatten_block(prefix, name, value)
