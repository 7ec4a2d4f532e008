"""Mean-Shift Feature transformer: MSF attention in Swin and in simple ViTs.

Kobayashi, "Mean-Shift Feature Transformer", CVPR 2024 (paper and code:
https://github.com/tk1980/MSFtransformer). The attention is
:class:`~vitattn_mm.models.attentions.MeanShiftAttention`. The official
repository holds one SimpleViT-S classifier: :class:`MSFViT` follows it
exactly and adds what dense prediction needs (any input size, multi-level
NCHW outputs for SETR). :class:`MSFSwinTransformer` puts the same attention
into Swin's shifted windows (paper Table 6), with Swin's relative position
bias and shift mask. ``mean_shift=False`` turns either backbone into the
paper's softmax baseline with the same layout.
"""
from typing import Union

import torch.nn as nn

from ...registry import register_model
from .base_backbone import family_attn_cfgs
from .swin import AttnSwinTransformer
from .vit import DEIT, NO_CLS_TOKEN_CONVENTIONS, AttnViT


@register_model
class MSFSwinTransformer(AttnSwinTransformer):
    """Swin Transformer with MSF attention in every window (paper Table 6).

    :class:`AttnSwinTransformer` with :class:`MeanShiftAttention` as the
    window attention of every stage (inside the window wrapper,
    :class:`~vitattn_mm.models.attentions.WindowedAttention`, registered
    as ``ShiftWindowMSA``; with Swin's relative position bias and shift
    mask).
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
    converter_command = 'tools/model_converters/msf2vitattn.py'
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
        kwargs['attn_cfgs'] = family_attn_cfgs(
            type(self), kwargs,
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
    of the paper's "Orig." rows; ``groups=2`` the "w/ 2-group" rows. The
    official checkpoints load through any loader (the ViT skeleton converts
    Simple ViT's layout, :func:`~vitattn_mm.models.backbones.vit.convert_simple_vit`).

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
        arch (str | dict): The paper's 'ti', 'ss', 's', 'b' (or 'tiny',
            'small', 'base'; DeiT's sizes), any other name of
            :class:`AttnViT` (mmpretrain's), or a dict with
            ``embed_dims``, ``depth`` and ``num_heads``. Default: 'small'.
        mean_shift (bool): MSF attention; False for softmax attention.
            Default: True.
        groups (int): Groups of the q/k/v/p projection. Default: 1.
        group_mode (str): 'interleave' (the paper's) or 'block'.
            Default: 'interleave'.
        qkv_bias (bool): Bias in the q/k/v/p projection and the output
            projection (the official model has none). Default: False.
        fused (bool): Fused attention kernel. Default: True.
        pos_embed (str): 'sincos' or 'learned'. Default: 'sincos'.
        patch_embed (str): Default: 'pixel_norm' (Simple ViT's).
        with_cls_token (bool): Default: False (Simple ViT has none).
        final_norm (bool): Default: False (each output has its norm).
        out_norm (bool): A LayerNorm per output. Default: True.
        norm_cfg (dict): Default: ``dict(type='LN')``.
        interpolate_mode (str): How a learned position table is resized.
            Default: 'bilinear'.
        **kwargs: :class:`AttnViT` arguments (``patch_size``,
            ``mlp_ratio``, ``pretrain_img_size``, ``out_indices``,
            ``out_type``, ``drop_path_rate``, ``with_cp``,
            ``frozen_stages``, ``init_cfg``...).
    """
    converter_command = 'tools/model_converters/msf2vitattn.py'

    # The paper's sizes (DeiT's widths; 'ss': six blocks of 384).
    arch_zoo = {
        ('ti', 'tiny'): DEIT['tiny'],
        'ss': dict(embed_dims=384, depth=6, num_heads=6),
        ('s', 'small'): DEIT['small'],
        ('b', 'base'): DEIT['base'],
    }
    conventions = NO_CLS_TOKEN_CONVENTIONS

    def __init__(self,
                 arch: Union[str, dict] = 'small',
                 mean_shift: bool = True,
                 groups: int = 1,
                 group_mode: str = 'interleave',
                 qkv_bias: bool = False,
                 fused: bool = True,
                 pos_embed: str = 'sincos',
                 patch_embed: str = 'pixel_norm',
                 with_cls_token: bool = False,
                 final_norm: bool = False,
                 out_norm: bool = True,
                 norm_cfg: dict = dict(type='LN'),
                 interpolate_mode: str = 'bilinear',
                 **kwargs):
        kwargs['attn_cfgs'] = family_attn_cfgs(
            type(self), kwargs,
            dict(type='MeanShiftAttention',
                 mean_shift=mean_shift,
                 groups=groups,
                 group_mode=group_mode,
                 proj_bias=qkv_bias,
                 fused=fused))
        super().__init__(
            arch=arch, qkv_bias=qkv_bias, pos_embed=pos_embed,
            patch_embed=patch_embed, with_cls_token=with_cls_token,
            final_norm=final_norm, out_norm=out_norm, norm_cfg=norm_cfg,
            interpolate_mode=interpolate_mode, **kwargs)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        """PyTorch's default initialisation, as the official model trains."""
