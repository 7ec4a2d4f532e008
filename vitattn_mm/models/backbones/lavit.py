"""LaViT: Less-Attention in the paper's backbones and as plug-ins.

Zhang et al., "You Only Need Less Attention at Each Stage in Vision
Transformers", CVPR 2024 (https://arxiv.org/abs/2406.00427). The attentions
(VA and LA layers, the Attention Residual, the Diagonality-Preserving loss)
are :mod:`vitattn_mm.models.attentions.less_attention`; this file holds the
arch zoos and where the layers go in PVT (LaViT), a plain ViT and Swin.
See ``docs/lavit.md`` for every decision and deviation.
"""
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple, Union

from ...registry import register_model
from ..attentions.less_attention import (attention_residuals,
                                         less_attention_cfg,
                                         less_attention_layers)
from ..layers.common import pretrain_input_size
from .base_backbone import family_attn_cfgs
from .pvt import PVT_WIDTHS, AttnPVT
from .swin import AttnSwinTransformer
from .vit import NO_CLS_TOKEN_CONVENTIONS, AttnViT


# --------------------------------------------------------------- the plans
# Each family's ``attn_cfgs`` callable, ``plan(arch, grids)``: where its VA
# and LA layers go, given the resolved arch.


@dataclass(frozen=True)
class LaViTPlan:
    """LaViT's layers in PVT: per stage, VA layers up to the arch's
    ``la_start`` (0: none), then LA layers (``less``), with an attention
    residual in the first layer of every stage after the first.

    Args:
        less (dict): The LA layers' config (:func:`less_attention_cfg`).
        less_attention (bool): Build LA layers. Default: True.
        attn_residual (bool): Attention Residual between stages.
            Default: True.
        ar_layer_scale_init (float): Its initial LayerScale. Default: 0.1.
    """
    less: dict
    less_attention: bool = True
    attn_residual: bool = True
    ar_layer_scale_init: float = 0.1

    def __call__(self, arch: dict, grids: list) -> list:
        depths = arch['depths']
        residual = attention_residuals(
            'conv', arch['num_heads'],
            self.ar_layer_scale_init) if self.attn_residual else None
        return less_attention_layers(
            depths, arch['la_start'] if self.less_attention else
            [0] * len(depths), dict(type='VanillaAttention'), self.less,
            residual)


@dataclass(frozen=True)
class LessAttnViTPlan:
    """Less-Attention in a plain ViT: VA blocks before ``la_start`` (the
    arch's when None), LA blocks from it; one stage per block.

    Args:
        less (dict): The LA layers' config.
        la_start (int, optional): 1-based index of the first LA block.
            Default: None.
        less_attention (bool): Build LA layers. Default: True.
    """
    less: dict
    la_start: Optional[int] = None
    less_attention: bool = True

    def __call__(self, arch: dict, grids: list) -> list:
        start = arch.get('la_start') if self.la_start is None else \
            self.la_start
        if start is None:
            raise ValueError('give la_start (the first LA block, '
                             '1-based) with a custom arch')
        layers, = less_attention_layers(
            [arch['depth']], [start if self.less_attention else 0],
            dict(type='VanillaAttention'), self.less)
        return [[layer] for layer in layers]


@dataclass(frozen=True)
class LessAttnSwinPlan:
    """Less-Attention in Swin's windows: VA layers (Swin's shift
    alternation) up to each stage's ``la_start``, then window LA layers
    that keep the shift of the stage's last VA layer, with a window
    attention residual in the first layer of every stage after the first.

    Args:
        less (dict): The LA layers' config (unwindowed).
        window_size (int): Window side.
        la_start (tuple[int], optional): Per stage, the first LA layer
            (1-based, 0: none); the arch's when None. Default: None.
        less_attention (bool): Build LA layers. Default: True.
        attn_residual (bool): Attention Residual between stages.
            Default: True.
        ar_layer_scale_init (float): Its initial LayerScale. Default: 0.1.
    """
    less: dict
    window_size: int
    la_start: Optional[Tuple[int, ...]] = None
    less_attention: bool = True
    attn_residual: bool = True
    ar_layer_scale_init: float = 0.1

    def __call__(self, arch: dict, grids: list) -> list:
        window = dict(type='WindowedAttention', window_size=self.window_size)
        less = dict(window, window_msa=self.less['type'],
                    **{k: v for k, v in self.less.items() if k != 'type'})
        depths, heads = arch['depths'], arch['num_heads']
        start = arch.get('la_start') if self.la_start is None else \
            list(self.la_start)
        if start is None or len(start) != len(depths):
            raise ValueError(f'la_start needs one entry per stage '
                             f'({len(depths)}), got {start}')
        if not self.less_attention:
            start = [0] * len(depths)
        vanilla = [[
            dict(window, window_msa='VanillaAttention', shift=j % 2 == 1)
            for j in range(depth)
        ] for depth in depths]
        residual = attention_residuals(
            'window', heads,
            self.ar_layer_scale_init) if self.attn_residual else None
        layers = less_attention_layers(depths, start, vanilla, less,
                                       residual)
        for stage, first in zip(layers, start):
            if first:  # LA layers keep the windows of the last VA layer
                for cfg in stage[first - 1:]:
                    cfg['shift'] = stage[first - 2]['shift']
        return layers


@register_model
class LaViT(AttnPVT):
    """LaViT backbone: PVT with Less-Attention layers (paper Table 1).

    :class:`AttnPVT` whose blocks are VA (:class:`VanillaAttention`) and LA
    (:class:`LessAttention`) layers, with an :class:`AttentionResidual` in
    the first layer of every stage but the first and the
    Diagonality-Preserving loss over the LA maps. With
    ``less_attention=False, attn_residual=False`` it is PVT (the paper's
    Table 6 baseline); LaViT-T / S are Table 5's PVT+LA.

    ``la_start`` is the paper's N_LA read as the 1-based index of the first
    LA layer of each stage, 0 meaning none: T ``[0, 0, 2, 2]`` has one LA
    layer in each of stages 3 and 4, S ``[0, 0, 3, 2]`` four and two, B
    ``[0, 2, 4, 3]`` two, fifteen and one (the paper's Table 7 numbers
    layers this way; the reading reproduces the S and B classification
    parameter counts).

    Args:
        arch (str | dict): 'tiny', 'small', 'base' (or 't', 's', 'b'), or a
            dict with ``embed_dims``, ``depths``, ``num_heads``,
            ``mlp_ratios`` and ``la_start`` (one per stage).
            Default: 'tiny'.
        pretrain_img_size (int | tuple[int, int]): Input size the weights
            were trained on: sizes the position embeddings (resized to the
            running grid at other sizes) and the dense transform.
            Default: 224.
        sr_ratios (Sequence[int]): Spatial reduction of keys / values per
            stage. With the Attention Residual each must halve the previous
            one (the key grid stays the same). Default: (8, 4, 2, 1).
        less_attention (bool): Build LA layers; False puts vanilla attention
            in their place (the same network without Less-Attention, e.g.
            to measure what it saves). Default: True.
        la_transform (str): 'conv' (any input size) or 'dense' (the paper's
            N x N maps, only at ``pretrain_img_size``). Default: 'conv'.
        la_kernel_size (int): Kernel of the 'conv' transform. Default: 3.
        attn_residual (bool): Attention Residual between stages.
            Default: True.
        ar_layer_scale_init (float): Initial LayerScale of the residual.
            Default: 0.1.
        dp_loss_weight (float): Weight of the Diagonality-Preserving loss
            (mean over LA layers), returned as ``loss_dp`` by
            ``pop_aux_losses()`` after a training forward pass; 0 disables
            it. Default: 0.1.
        dp_loss_form (str): 'bounded' (ours) or 'paper' (Eq. 9-10 as
            printed: summed over LA layers, unbounded; use with
            ``dp_loss_weight=1.`` to reproduce the paper as written).
            Default: 'bounded'.
        paddings (Sequence[int | str]): Patch embedding paddings; 'corner'
            keeps the key grid the same in every stage. Default: 'corner'
            in every stage.
        out_norm (bool): A LayerNorm per output. Default: True.
        patch_norm_cfg (dict): Norm of the patch embeddings.
            Default: ``dict(type='LN')``.
        **kwargs: The other :class:`AttnPVT` arguments (mmdet's
            ``num_layers``, ``embed_dims`` ..., ``drop_path_rate``,
            ``out_indices``, ``norm_cfg``, ``with_cp``, ``frozen_stages``,
            ``init_cfg``).
    """
    arch_zoo = {
        ('t', 'tiny'): dict(depths=[2, 2, 2, 2], la_start=[0, 0, 2, 2],
                            **PVT_WIDTHS),
        ('s', 'small'): dict(depths=[3, 4, 6, 3], la_start=[0, 0, 3, 2],
                             **PVT_WIDTHS),
        ('b', 'base'): dict(depths=[3, 3, 18, 3], la_start=[0, 2, 4, 3],
                            **PVT_WIDTHS),
    }
    arch_keys = ('embed_dims', 'depths', 'num_heads', 'mlp_ratios',
                 'la_start')

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 pretrain_img_size: Union[int, Tuple[int, int]] = 224,
                 sr_ratios: Sequence[int] = (8, 4, 2, 1),
                 less_attention: bool = True,
                 la_transform: str = 'conv',
                 la_kernel_size: int = 3,
                 attn_residual: bool = True,
                 ar_layer_scale_init: float = 0.1,
                 dp_loss_weight: float = 0.1,
                 dp_loss_form: str = 'bounded',
                 paddings: Sequence[Union[int, str]] = ('corner', ) * 4,
                 out_norm: bool = True,
                 patch_norm_cfg: dict = dict(type='LN'),
                 **kwargs):
        if attn_residual and any(sr_ratios[i - 1] != 2 * sr_ratios[i]
                                 for i in range(1, len(sr_ratios))):
            raise ValueError(
                'the attention residual needs the same key grid in every '
                'stage: each sr_ratio must halve the previous one, e.g. '
                f'(8, 4, 2, 1); got {tuple(sr_ratios)}')
        plan = LaViTPlan(
            less_attention_cfg(la_transform, la_kernel_size,
                               pretrain_img_size, dp_loss_weight,
                               dp_loss_form), less_attention, attn_residual,
            ar_layer_scale_init)
        super().__init__(
            arch=arch,
            attn_cfgs=family_attn_cfgs(type(self), kwargs, plan),
            pretrain_img_size=pretrain_img_size,
            sr_ratios=sr_ratios,
            paddings=paddings,
            out_norm=out_norm,
            patch_norm_cfg=patch_norm_cfg,
            **kwargs)


@register_model
class LessAttnViT(AttnViT):
    """Less-Attention plug-in for plain ViTs (LaViT Table 5: ViT+LA,
    DeiT+LA): the :class:`AttnViT` skeleton whose first ``la_start - 1``
    blocks are VA layers (:class:`VanillaAttention`, plain multi-head
    self-attention) and the rest LA layers (:class:`LessAttention`).

    A plain ViT has one stage, so there is no Attention Residual. DeiT+LA is
    the default DeiT layout without class token (conv patches, learned
    positions, the mean token for classification); ViT+LA the Simple-ViT
    one (``patch_embed='pixel_norm', pos_embed='sincos'``).

    Args:
        arch (str | dict): The paper's 'tiny', 'small' (or 't', 's',
            'deit-tiny', 'deit-small' ...), any other name of
            :class:`AttnViT` (mmpretrain's, with ``la_start=4``), or a dict
            with ``embed_dims``, ``depth``, ``num_heads`` and
            ``la_start``. Default: 'tiny'.
        la_start (int, optional): 1-based index of the first LA block (0:
            none); overrides the arch's. Default: None.
        less_attention (bool): Build LA layers; False gives the same ViT
            with vanilla attention throughout (the Table 5 base).
            Default: True.
        la_transform (str): 'conv' (any input size) or 'dense' (the paper's
            N x N maps, only at ``pretrain_img_size``). Default: 'conv'.
        la_kernel_size (int): Kernel of the 'conv' transform. Default: 3.
        dp_loss_weight (float): Weight of the Diagonality-Preserving loss
            (``loss_dp``). Default: 0.1.
        dp_loss_form (str): 'bounded' (ours) or 'paper' (Eq. 9-10 as
            printed). Default: 'bounded'.
        pretrain_img_size (int | tuple[int, int]): Sizes the learned
            position embedding and the dense transform (``img_size``).
            Default: 224.
        with_cls_token (bool): Default: False (no class token).
        final_norm (bool): Default: False (each output has its norm).
        out_norm (bool): A norm per output (``norm{i}``). Default: True.
        norm_cfg (dict): Default: ``dict(type='LN')`` (eps 1e-5).
        patch_bias (bool): Bias of the patch embedding. Default: True.
        interpolate_mode (str): How position tables are resized.
            Default: 'bilinear'.
        **kwargs: The other :class:`AttnViT` arguments (``patch_embed``,
            ``pos_embed``, ``out_indices``, ``out_type``,
            ``drop_path_rate``, ``with_cp``, ``frozen_stages``,
            ``init_cfg``, ...).
    """
    arch_zoo = {
        ('t', 'tiny', 'ti', 'deit-t', 'deit-tiny'):
        dict(embed_dims=192, depth=12, num_heads=3, la_start=4),
        ('s', 'small', 'deit-s', 'deit-small'):
        dict(embed_dims=384, depth=12, num_heads=6, la_start=4),
    }
    # The stock ViT names (e.g. mmpretrain's 'b'): LA from block 4, as the
    # paper's DeiTs.
    stock_arch_defaults = dict(la_start=4)
    conventions = NO_CLS_TOKEN_CONVENTIONS

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 la_start: Optional[int] = None,
                 less_attention: bool = True,
                 la_transform: str = 'conv',
                 la_kernel_size: int = 3,
                 dp_loss_weight: float = 0.1,
                 dp_loss_form: str = 'bounded',
                 pretrain_img_size: Union[int, Tuple[int, int]] = 224,
                 with_cls_token: bool = False,
                 final_norm: bool = False,
                 out_norm: bool = True,
                 norm_cfg: dict = dict(type='LN'),
                 patch_bias: bool = True,
                 interpolate_mode: str = 'bilinear',
                 **kwargs):
        pretrain_img_size = pretrain_input_size(kwargs.pop('img_size', None),
                                                pretrain_img_size)
        plan = LessAttnViTPlan(
            less_attention_cfg(la_transform, la_kernel_size,
                               pretrain_img_size, dp_loss_weight,
                               dp_loss_form), la_start, less_attention)
        super().__init__(
            arch=arch, attn_cfgs=family_attn_cfgs(type(self), kwargs, plan),
            img_size=pretrain_img_size, with_cls_token=with_cls_token,
            final_norm=final_norm, out_norm=out_norm, norm_cfg=norm_cfg,
            patch_bias=patch_bias, interpolate_mode=interpolate_mode,
            **kwargs)


@register_model
class LessAttnSwinTransformer(AttnSwinTransformer):
    """Less-Attention plug-in for Swin (LaViT Table 5: Swin+LA): the
    :class:`AttnSwinTransformer` skeleton whose blocks are VA layers in
    Swin's windows (:class:`VanillaAttention` with the relative position
    bias, Swin's shift alternation) up to ``la_start`` in each stage, then
    window LA layers, with a :class:`WindowAttentionResidual` in the first
    layer of every stage but the first and the Diagonality-Preserving loss
    over the LA maps.

    Shifted windows: an LA layer works in the windows of the logits it
    transforms, so every LA layer of a stage takes the shift of the stage's
    last VA layer and Swin's alternation continues in the VA layers only
    (``docs/lavit.md`` gives the reasons).

    Args:
        arch (str | dict): 'tiny', 'small' (or 't', 's'), or a dict with
            ``embed_dims``, ``depths``, ``num_heads`` and optionally
            ``la_start`` (one per stage). Default: 'tiny'.
        la_start (Sequence[int], optional): Per stage, the 1-based index of
            the first LA layer (0: none); overrides the arch's.
            Default: None.
        less_attention (bool): Build LA layers; False gives Swin with the
            same window attention throughout (the Table 5 base).
            Default: True.
        la_transform (str): 'conv' (banded maps, as LaViT's) or 'dense'
            (the paper's N x N maps over a window's tokens, which windows
            allow at any input size, at about 3x the transform cost).
            Default: 'conv'.
        la_kernel_size (int): Kernel of the 'conv' transform. Default: 3.
        attn_residual (bool): Attention Residual between stages.
            Default: True.
        ar_layer_scale_init (float): Initial LayerScale of the residual.
            Default: 0.1.
        dp_loss_weight (float): Weight of the Diagonality-Preserving loss
            (``loss_dp``). Default: 0.1.
        dp_loss_form (str): 'bounded' (ours) or 'paper' (Eq. 9-10 as
            printed). Default: 'bounded'.
        window_size (int): Window side. Default: 7.
        **kwargs: The other :class:`AttnSwinTransformer` arguments
            (``out_indices``, ``drop_path_rate``, ``with_cp``,
            ``frozen_stages``, ``init_cfg``, mmdet's keyword names, ...).
    """
    arch_zoo = {
        ('t', 'tiny'): dict(embed_dims=96, depths=[2, 2, 6, 2],
                            num_heads=[3, 6, 12, 24], la_start=[2, 2, 2, 2]),
        ('s', 'small'): dict(embed_dims=96, depths=[2, 2, 18, 2],
                             num_heads=[3, 6, 12, 24],
                             la_start=[0, 0, 4, 0]),
    }

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 la_start: Optional[Sequence[int]] = None,
                 less_attention: bool = True,
                 la_transform: str = 'conv',
                 la_kernel_size: int = 3,
                 attn_residual: bool = True,
                 ar_layer_scale_init: float = 0.1,
                 dp_loss_weight: float = 0.1,
                 dp_loss_form: str = 'bounded',
                 window_size: int = 7,
                 **kwargs):
        plan = LessAttnSwinPlan(
            less_attention_cfg(la_transform, la_kernel_size, window_size,
                               dp_loss_weight, dp_loss_form), window_size,
            None if la_start is None else tuple(la_start), less_attention,
            attn_residual, ar_layer_scale_init)
        super().__init__(
            arch=arch, attn_cfgs=family_attn_cfgs(type(self), kwargs, plan),
            window_size=window_size, **kwargs)
