"""L2ViT: enhanced linear global attention + local window attention.

Zheng et al., "The Linear Attention Resurrection in Vision Transformer"
(https://arxiv.org/abs/2501.16182). Every stage alternates a Local Window
Attention block (softmax attention in 7x7 windows) and a Linear Global
Attention block (ReLU linear attention over the whole map, followed by the
Local Concentration Module), with conditional positional encodings (CPE)
instead of position embeddings.

The skeleton computes exactly what the official implementation
(ChuanyangZheng/L2ViT) computes and keeps its parameter names where they do
not fight OpenMMLab's (:func:`convert_official_l2vit` maps the rest).
Added for dense prediction and mixed precision: any input size (padding
inside the stem, the downsampling layers and the window attention, cropped
back), NCHW multi-scale outputs with a LayerNorm each, and a linear
attention whose products run in fp32 under autocast.
"""
import functools
import re
from collections import OrderedDict
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmcv.cnn import build_activation_layer, build_norm_layer
from mmengine.model import BaseModule, ModuleList
from mmengine.model.weight_init import trunc_normal_

from ...registry import register_model
from ..attentions.linear_global import LocalConcentrationModule
from ..attentions.cfgs import resolve_attn_cfgs
from ..layers.blocks import TransformerBlock
from ..layers.drop_path import add_residual
from ..layers.common import nchw_to_nlc, to_2tuple_int
from ..layers.padding import CornerPadding
from ..layers.pos_embed import ConditionalPositionEncoding
from ..layers.stage import drop_path_slices, norm_layer
from ..checkpoint.pretrained import StateDict
from .backbone_spec import BackboneSpec
from .base_backbone import StagedBackbone
from .input_size import grids_at, strided_grid_sides
from .stage_spec import StageSpec
from ..checkpoint.adapt import block_converter


class ConvStem(BaseModule):
    """Two 3x3 stride-2 convolutions, then a LayerNorm on the tokens.

    ``conv1 (C/2) -> BN -> ReLU -> conv2 (C) -> BN`` (convolutions with
    bias, as officially), then ``LN``. The image is first padded at the
    bottom/right to a multiple of 4, as the official patch embedding does,
    so the token grid is ``ceil(H/4) x ceil(W/4)``.

    Args:
        in_channels (int): Image channels.
        embed_dims (int): Output channels C.
        conv_norm_cfg (dict): Norm after each convolution.
            Default: ``dict(type='BN')``.
        act_cfg (dict): Activation between the convolutions.
            Default: ``dict(type='ReLU')``.
        norm_cfg (dict): Norm of the output tokens.
            Default: ``dict(type='LN')``.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """

    def __init__(self,
                 in_channels: int,
                 embed_dims: int,
                 conv_norm_cfg: dict = dict(type='BN'),
                 act_cfg: dict = dict(type='ReLU'),
                 norm_cfg: dict = dict(type='LN'),
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        hidden_dims = embed_dims // 2
        self.adaptive_padding = CornerPadding(4)
        self.conv1 = nn.Conv2d(in_channels, hidden_dims, 3, 2, 1)
        self.norm1 = build_norm_layer(conv_norm_cfg, hidden_dims)[1]
        self.act = build_activation_layer(act_cfg)
        self.conv2 = nn.Conv2d(hidden_dims, embed_dims, 3, 2, 1)
        self.norm2 = build_norm_layer(conv_norm_cfg, embed_dims)[1]
        self.norm = build_norm_layer(norm_cfg, embed_dims)[1]

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, tuple]:
        """``(B, 3, H, W)`` image -> ``(B, N, C)`` tokens and their grid."""
        x = self.adaptive_padding(x)
        x = self.act(self.norm1(self.conv1(x)))
        x = self.norm2(self.conv2(x))
        hw_shape = tuple(x.shape[-2:])
        return self.norm(nchw_to_nlc(x)), hw_shape


class ConvDownsample(BaseModule):
    """LayerNorm on the tokens, then a 2x2 stride-2 convolution: what opens
    every L2ViT stage but the first.

    Maps with an odd side are padded at the bottom/right first (official
    behaviour), so the grid becomes ``ceil(H/2) x ceil(W/2)``.

    Args:
        in_channels (int): Input channels.
        out_channels (int): Output channels.
        norm_cfg (dict): Norm before the convolution.
            Default: ``dict(type='LN')``.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """

    def __init__(self,
                 in_channels: int,
                 out_channels: int,
                 norm_cfg: dict = dict(type='LN'),
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        self.norm = build_norm_layer(norm_cfg, in_channels)[1]
        self.adaptive_padding = CornerPadding(2)
        self.proj = nn.Conv2d(in_channels, out_channels, 2, 2)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, tuple]:
        """``(B, C, H, W)`` map -> ``(B, N, C')`` tokens and their grid."""
        x = self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        x = self.proj(self.adaptive_padding(x))
        return nchw_to_nlc(x), tuple(x.shape[-2:])


class L2ViTBlock(TransformerBlock):
    """The shared pre-norm block with L2ViT's conditional positional
    encodings (CPE) and, in LGA blocks, the Local Concentration Module.

    ``x = cpe0(x)``; ``x = x + attn(norm1(x))``; then ``x = cpe1(x)``
    (LWA blocks) or ``x = x + lcm(norm3(x))`` (LGA blocks);
    ``x = x + mlp(norm2(x))``. The attention is any registered one: LWA
    blocks have local windows (:class:`~vitattn_mm.models.attentions.WindowedAttention` around
    :class:`~vitattn_mm.models.attentions.MultiheadSelfAttention`, the map padded to a multiple of the
    window, padded tokens taking part as the official code has it), LGA
    blocks
    :class:`~vitattn_mm.models.attentions.LinearGlobalAttention`.

    Args:
        embed_dims (int): Channels C.
        attn (nn.Module): The block's attention.
        local_window (bool): An LWA block (two CPEs); otherwise an LGA
            block (one CPE and the LCM).
        mlp_ratio (float): MLP hidden channels / C. Default: 4.
        drop_path (float): Stochastic depth rate. Default: 0.
        lcm_kernel_size (int): Kernel of the LCM convolutions. Default: 7.
        norm_cfg (dict): Default: ``dict(type='LN')``.
        act_cfg (dict): MLP activation. Default: ``dict(type='GELU')``.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """

    def __init__(self,
                 embed_dims: int,
                 attn: nn.Module,
                 local_window: bool,
                 mlp_ratio: float = 4.,
                 drop_path: float = 0.,
                 lcm_kernel_size: int = 7,
                 norm_cfg: dict = dict(type='LN'),
                 act_cfg: dict = dict(type='GELU'),
                 init_cfg: Optional[dict] = None):
        super().__init__(
            embed_dims,
            attn,
            ffn_ratio=mlp_ratio,
            drop_path=drop_path,
            act_cfg=act_cfg,
            norm_cfg=norm_cfg,
            init_cfg=init_cfg)
        self.cpe = ModuleList([
            ConditionalPositionEncoding(embed_dims, embed_dims)
            for _ in range(2 if local_window else 1)
        ])
        if not local_window:
            self.norm3 = build_norm_layer(norm_cfg, embed_dims)[1]
            self.local_mp = LocalConcentrationModule(embed_dims,
                                                     lcm_kernel_size)

    def forward(self, x: torch.Tensor, hw_shape: Tuple[int, int],
                state=None):
        x = self.cpe[0](x, hw_shape)
        out, state = self.attn(self.norm1(x), hw_shape, state)
        x = add_residual(x, out, self.drop_path)
        if len(self.cpe) > 1:
            x = self.cpe[1](x, hw_shape)
        else:
            x = add_residual(x, self.local_mp(self.norm3(x), hw_shape),
                             self.drop_path)
        return self.feed_forward(x, hw_shape), state


#: L2ViT's attentions: local windows in even blocks, linear global
#: attention in odd ones.
L2VIT_LOCAL = dict(type='WindowedAttention', window_msa='LocalWindowAttention')
L2VIT_GLOBAL = dict(type='LinearGlobalAttention')


def l2vit_attention(stage: int, block: int, window_size: int,
                    denominator_min: float) -> dict:
    """L2ViT's attention of a block: local windows in the even blocks,
    linear global attention in the odd (the ``attn_cfgs`` default)."""
    if block % 2:
        return dict(L2VIT_GLOBAL, denominator_min=denominator_min)
    return dict(L2VIT_LOCAL, window_size=window_size)


@register_model
class L2ViT(StagedBackbone):
    """L2ViT backbone: LWA and LGA blocks in alternation.

    Layout (paper Table 13): a convolutional stem to stride 4
    (``patch_embed``), then four stages, each but the first opened by a
    LayerNorm + 2x2 stride-2 conv (``stages.{i}.patch_embed``); stage ``i`` holds ``depths[i]`` blocks
    alternating LWA, LGA, LWA, LGA... Every output index gets its own
    LayerNorm (``norm{i}``), and outputs are NCHW maps.

    Any input size works: the stem and the downsampling layers pad odd maps
    at the bottom/right and the window attention pads to a multiple of the
    window, cropping back, exactly as the official code. There is no
    position embedding (CPE follows the running map); ``pretrain_img_size``
    only sizes the learned encodings of attentions swapped in that have
    them.

    Args:
        arch (str | dict): 'tiny', 'small', 'base' (or 't', 's', 'b'), or a
            dict with ``embed_dims``, ``depths`` and ``num_heads`` (one per
            stage). Default: 'tiny'.
        attn_cfgs (dict | list | callable, optional): The attention of
            every stage (a dict), of each stage or of each block (lists), or
            a family's plan ``plan(arch, grids)``; None for
            L2ViT's (``L2VIT_LOCAL`` in even blocks, ``L2VIT_GLOBAL`` in odd
            ones); the blocks keep L2ViT's CPE and LCM around any.
            Default: None.
        pretrain_img_size (int | tuple[int, int]): See above. Default: 224.
        in_channels (int): Input channels. Default: 3.
        window_size (int): LWA window (12 for 384 fine-tuning). Default: 7.
        mlp_ratio (float): MLP hidden channels / C. Default: 4.
        qkv_bias (bool): Bias in every qkv projection. Default: True.
        denominator_min (float): Clamp of the linear attention's
            normaliser. Default: 100.
        lcm_kernel_size (int): Kernel of the LCM convolutions. Default: 7.
        drop_path_rate (float): Stochastic depth, increasing linearly over
            all blocks. Default: 0.1.
        out_indices (Sequence[int] | int): Output stages.
            Default: (0, 1, 2, 3).
        norm_cfg (dict): Token norms. Default: ``dict(type='LN')``.
        conv_norm_cfg (dict): Norms of the stem and the LCM.
            Default: ``dict(type='BN')``.
        **kwargs: :class:`StagedBackbone`'s ``frozen_stages``,
            ``norm_eval`` (here the BatchNorms of the stem and the LCMs),
            ``with_cp`` (the LCM's BatchNorm statistics then update twice
            per step), ``convert_weights``, ``pretrained`` and ``init_cfg``
            (official files load too: ``state_dict_key=None | 'model' |
            'model_ema'``).

    Example:
        >>> import torch
        >>> from vitattn_mm.models import L2ViT
        >>> model = L2ViT('tiny', out_indices=(1, 2, 3)).eval()
        >>> for out in model(torch.rand(1, 3, 97, 130)):
        ...     print(tuple(out.shape))
        (1, 192, 13, 17)
        (1, 384, 7, 9)
        (1, 768, 4, 5)
    """
    converter_command = 'tools/model_converters/l2vit2vitattn.py'
    arch_zoo = {
        ('t', 'tiny'):
        dict(embed_dims=[96, 192, 384, 768], depths=[2, 2, 6, 2],
             num_heads=[3, 6, 12, 24]),
        ('s', 'small'):
        dict(embed_dims=[96, 192, 384, 768], depths=[2, 2, 18, 2],
             num_heads=[3, 6, 12, 24]),
        ('b', 'base'):
        dict(embed_dims=[128, 256, 512, 1024], depths=[2, 2, 18, 2],
             num_heads=[4, 8, 16, 32]),
    }
    arch_keys = ('embed_dims', 'depths', 'num_heads')

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 attn_cfgs=None,
                 pretrain_img_size: Union[int, Tuple[int, int]] = 224,
                 in_channels: int = 3,
                 window_size: int = 7,
                 mlp_ratio: float = 4.,
                 qkv_bias: bool = True,
                 denominator_min: float = 100.,
                 lcm_kernel_size: int = 7,
                 drop_path_rate: float = 0.1,
                 out_indices: Union[int, Sequence[int]] = (0, 1, 2, 3),
                 norm_cfg: dict = dict(type='LN'),
                 conv_norm_cfg: dict = dict(type='BN'),
                 **kwargs):
        arch = self.resolve_arch(arch)
        super().__init__(len(arch['depths']), out_indices, **kwargs)
        embed_dims, depths = arch['embed_dims'], arch['depths']
        num_stages = self.num_stages
        self.embed_dims = embed_dims
        self.num_features = list(embed_dims)

        grid_sides = functools.partial(
            strided_grid_sides, [4 * 2**i for i in range(num_stages)])
        grids = grids_at(grid_sides, to_2tuple_int(pretrain_img_size,
                                                   'pretrain_img_size'))
        cfgs = resolve_attn_cfgs(
            attn_cfgs, arch, depths, grids,
            functools.partial(l2vit_attention, window_size=window_size,
                              denominator_min=denominator_min))
        drop_paths = drop_path_slices(drop_path_rate, depths)
        stages = [StageSpec(
            embed_dims[i], arch['num_heads'][i], grids[i], cfgs[i],
            drop_paths[i],
            functools.partial(L2ViTBlock, embed_dims[i], mlp_ratio=mlp_ratio,
                              lcm_kernel_size=lcm_kernel_size,
                              norm_cfg=norm_cfg),
            # Local windows in the even blocks, global in the odd.
            block_kwargs=[dict(local_window=j % 2 == 0)
                          for j in range(depth)],
            qkv_bias=qkv_bias,
            patch_embed=None if i == 0 else functools.partial(
                ConvDownsample, embed_dims[i - 1], embed_dims[i], norm_cfg))
            for i, depth in enumerate(depths)]
        self.build(BackboneSpec(
            arch, dict(patch_embed=functools.partial(
                ConvStem, in_channels, embed_dims[0], conv_norm_cfg,
                norm_cfg=norm_cfg)), stages, self.out_indices,
            grid_sides, output_norm=functools.partial(norm_layer, norm_cfg)))
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        """The official ImageNet initialisation: truncated normal (0.02)
        for linear and conv weights, zero biases; norms at 1 / 0."""
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            trunc_normal_(module.weight, std=.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)

    # ----------------------------------------------------------- weights
    @staticmethod
    def convert_official_keys(state_dict: StateDict,
                              block_attention) -> StateDict:
        """See :func:`convert_official_l2vit`."""
        return convert_official_l2vit(state_dict, block_attention)

#: Official name patterns -> ours (applied to every key, in order).
_OFFICIAL_RENAMES = (
    (r'^downsample_layers\.0\.proj\.proj\.0\.', 'patch_embed.conv1.'),
    (r'^downsample_layers\.0\.proj\.proj\.1\.', 'patch_embed.norm1.'),
    (r'^downsample_layers\.0\.proj\.proj\.3\.', 'patch_embed.conv2.'),
    (r'^downsample_layers\.0\.proj\.proj\.4\.', 'patch_embed.norm2.'),
    (r'^downsample_layers\.0\.', 'patch_embed.'),
    (r'^downsample_layers\.(\d+)\.', r'stages.\1.patch_embed.'),
    (r'\.mlp\.fc1\.', '.ffn.layers.0.0.'),
    (r'\.mlp\.fc2\.', '.ffn.layers.1.'),
    (r'\.local_mp\.bn\.', '.local_mp.norm.'),
)


def convert_official_l2vit(state_dict: StateDict,
                           block_attention) -> StateDict:
    """Official L2ViT keys -> ours; other layouts pass through.

    Renamed: the stem ``downsample_layers.0`` -> ``patch_embed``
    (``proj.proj.{0,1,3,4}`` -> ``conv1, norm1, conv2, norm2``),
    ``downsample_layers.{i}`` -> ``stages.{i}.patch_embed``;
    ``stages.{i}.{j}`` -> ``stages.{i}.blocks.{j}`` (the attention's
    tensors under ``attn.w_msa`` where the model runs it in windows: the
    LWA blocks); ``mlp.fc1`` / ``mlp.fc2`` -> mmcv FFN's ``ffn.layers.0.0``
    / ``ffn.layers.1``; the LCM's ``local_mp.bn`` -> ``local_mp.norm`` (so
    one ``'norm'`` rule covers every norm in optimizer configs); the
    classifier's final ``norm`` -> ``norm{last stage}``. ``head.*`` is left
    for the classifier.

    Args:
        state_dict (dict): The file's tensors.
        block_attention (callable): ``(stage, block) -> (attention name,
            windowed)`` of the model the file is loaded into.
    """
    if not any('.mlp.fc1.' in k or '.proj.proj.' in k for k in state_dict):
        return state_dict
    num_stages = 1 + max(
        (int(k.split('.')[1])
         for k in state_dict if re.match(r'stages\.\d+\.', k)),
        default=3)
    converted = OrderedDict()
    for key, value in state_dict.items():
        for pattern, replacement in _OFFICIAL_RENAMES:
            key = re.sub(pattern, replacement, key)
        m = re.match(r'stages\.(\d+)\.(\d+)\.(.+)', key)
        if m:
            stage, block, name = int(m.group(1)), int(m.group(2)), m.group(3)
            windowed = block_converter('l2vit', block_attention, stage,
                                       block, None)[1]
            if windowed and name.startswith('attn.'):
                name = 'attn.w_msa.' + name[len('attn.'):]
            key = f'stages.{stage}.blocks.{block}.{name}'
        if key.startswith('norm.'):
            key = f'norm{num_stages - 1}.' + key[len('norm.'):]
        converted[key] = value
    return converted
