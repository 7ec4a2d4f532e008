"""L2ViT: enhanced linear global attention + local window attention.

Zheng et al., "The Linear Attention Resurrection in Vision Transformer"
(https://arxiv.org/abs/2501.16182). Every stage alternates a Local Window
Attention block (softmax attention in 7x7 windows) and a Linear Global
Attention block (ReLU linear attention over the whole map, followed by the
Local Concentration Module), with conditional positional encodings (CPE)
instead of position embeddings.

The modules compute exactly what the official implementation
(ChuanyangZheng/L2ViT) computes and keep its parameter names where they do
not fight OpenMMLab's (:meth:`L2ViT.convert_checkpoint` maps the rest).
Added for dense prediction and mixed precision: any input size (padding
inside the stem, the downsampling layers and the window attention, cropped
back), NCHW multi-scale outputs with a LayerNorm each, and a linear
attention whose products run in fp32 under autocast.
"""
import argparse
import re
from collections import OrderedDict
from typing import Dict, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint as cp
from mmcv.cnn import build_activation_layer, build_norm_layer
from mmcv.cnn.bricks import DropPath
from mmcv.cnn.bricks.transformer import FFN, AdaptivePadding
from mmdet.models.layers import nchw_to_nlc, nlc_to_nchw
from mmengine.model import BaseModule, ModuleList
from mmengine.model.weight_init import trunc_normal_
from mmpretrain.models.utils import ConditionalPositionEncoding

from ...registry import register_model
from ..layers import (VitAttnBackbone, crop_tokens, freeze_module,
                      linear_drop_path_rates, pad_to_multiple, to_2tuple_int,
                      use_traceable_padding, window_partition, window_reverse)

StateDict = Dict[str, torch.Tensor]


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
        self.adaptive_padding = AdaptivePadding(
            kernel_size=4, stride=4, padding='corner')
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
    """LayerNorm on the tokens, then a 2x2 stride-2 convolution.

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
        self.adaptive_padding = AdaptivePadding(
            kernel_size=2, stride=2, padding='corner')
        self.proj = nn.Conv2d(in_channels, out_channels, 2, 2)

    def forward(self, x: torch.Tensor,
                hw_shape: Tuple[int, int]) -> Tuple[torch.Tensor, tuple]:
        x = nlc_to_nchw(self.norm(x), hw_shape)
        x = self.proj(self.adaptive_padding(x))
        return nchw_to_nlc(x), tuple(x.shape[-2:])


class LocalWindowAttention(BaseModule):
    """Multi-head softmax attention inside each (already partitioned) window.

    Swin's window attention without relative position bias (L2ViT encodes
    positions with CPE) and without shift: ``softmax(q k^T / sqrt(d)) v``
    through ``F.scaled_dot_product_attention``.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads.
        qkv_bias (bool): Bias in the qkv projection. Default: True.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 qkv_bias: bool = True,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        if embed_dims % num_heads:
            raise ValueError(f'embed_dims {embed_dims} is not divisible by '
                             f'num_heads {num_heads}')
        self.num_heads = num_heads
        self.qkv = nn.Linear(embed_dims, embed_dims * 3, bias=qkv_bias)
        self.proj = nn.Linear(embed_dims, embed_dims)

    def forward(self, windows: torch.Tensor) -> torch.Tensor:
        """``(B * num_windows, N, C)`` -> same shape."""
        B, N, C = windows.shape
        qkv = self.qkv(windows).reshape(B, N, 3, self.num_heads,
                                        C // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(B, N, C))


class LinearGlobalAttention(BaseModule):
    """ReLU linear attention over all tokens, keys and values first.

    Per head, with ``phi = ReLU`` and a learnable temperature ``s``
    (initialised to ``head_dim ** -0.5``)::

        out_i = phi(q_i) (s * sum_j phi(k_j)^T v_j)
                / max(phi(q_i) . sum_j phi(k_j), denominator_min)

    ``K^T V`` is a ``head_dim x head_dim`` matrix, so the cost is linear in
    the number of tokens. Clamping the denominator at 100 (the official
    value) keeps the variance of the output in check.

    Under autocast, the feature map and the products run in fp32: a sum of
    ``k^T v`` over the ~64k tokens of a 800x1280 image's first stage
    overflows fp16 (max 65504), and bf16 would keep 8 bits of such a sum.
    The projections keep the caller's precision; the fp32 part is
    ``O(N * head_dim)`` per head, small beside them.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads.
        qkv_bias (bool): Bias in the qkv projection. Default: True.
        denominator_min (float): Lower bound of the normaliser.
            Default: 100.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 qkv_bias: bool = True,
                 denominator_min: float = 100.,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        if embed_dims % num_heads:
            raise ValueError(f'embed_dims {embed_dims} is not divisible by '
                             f'num_heads {num_heads}')
        self.num_heads = num_heads
        self.denominator_min = denominator_min
        head_dims = embed_dims // num_heads
        self.temperature = nn.Parameter(
            torch.full((num_heads, 1, 1), head_dims**-0.5))
        self.qkv = nn.Linear(embed_dims, embed_dims * 3, bias=qkv_bias)
        self.proj = nn.Linear(embed_dims, embed_dims)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, N, C)`` -> same shape."""
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        with torch.autocast(x.device.type, enabled=False):
            q, k, v = F.relu(q.float()), F.relu(k.float()), v.float()
            kv = (k.transpose(-2, -1) @ v) * self.temperature.float()
            denominator = q @ k.sum(dim=-2).unsqueeze(-1)
            out = (q @ kv) / denominator.clamp(min=self.denominator_min)
        out = out.to(qkv.dtype).transpose(1, 2).reshape(B, N, C)
        return self.proj(out)

    def extra_repr(self) -> str:
        return (f'num_heads={self.num_heads}, '
                f'denominator_min={self.denominator_min}')


class LocalConcentrationModule(BaseModule):
    """LCM: ``DWConv7x7 -> GELU -> BN -> DWConv7x7`` on the token map.

    Re-concentrates the dispersed linear-attention output on each token's
    neighbourhood (the paper's Eq. 5-7). No inner residual: the block adds
    it.

    Args:
        embed_dims (int): Channels C.
        kernel_size (int): Depthwise kernel. Default: 7.
        act_cfg (dict): Default: ``dict(type='GELU')``.
        norm_cfg (dict): Default: ``dict(type='BN')``.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """

    def __init__(self,
                 embed_dims: int,
                 kernel_size: int = 7,
                 act_cfg: dict = dict(type='GELU'),
                 norm_cfg: dict = dict(type='BN'),
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        padding = kernel_size // 2
        self.conv1 = nn.Conv2d(embed_dims, embed_dims, kernel_size,
                               padding=padding, groups=embed_dims)
        self.act = build_activation_layer(act_cfg)
        self.norm = build_norm_layer(norm_cfg, embed_dims)[1]
        self.conv2 = nn.Conv2d(embed_dims, embed_dims, kernel_size,
                               padding=padding, groups=embed_dims)

    def forward(self, x: torch.Tensor,
                hw_shape: Tuple[int, int]) -> torch.Tensor:
        x = nlc_to_nchw(x, hw_shape)
        x = self.conv2(self.norm(self.act(self.conv1(x))))
        return nchw_to_nlc(x)


class L2ViTBlock(BaseModule):
    """What both L2ViT blocks share: pre-norm MLP, stochastic depth, CPE
    and gradient checkpointing.

    Args:
        embed_dims (int): Channels C.
        mlp_ratio (float): MLP hidden channels / C. Default: 4.
        drop_path (float): Stochastic depth rate. Default: 0.
        num_cpe (int): Conditional positional encodings of the block.
            Default: 1.
        norm_cfg (dict): Default: ``dict(type='LN')``.
        act_cfg (dict): MLP activation. Default: ``dict(type='GELU')``.
        with_cp (bool): Gradient checkpointing. Default: False.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """

    def __init__(self,
                 embed_dims: int,
                 mlp_ratio: float = 4.,
                 drop_path: float = 0.,
                 num_cpe: int = 1,
                 norm_cfg: dict = dict(type='LN'),
                 act_cfg: dict = dict(type='GELU'),
                 with_cp: bool = False,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        self.with_cp = with_cp
        self.cpe = ModuleList([
            ConditionalPositionEncoding(embed_dims, embed_dims)
            for _ in range(num_cpe)
        ])
        self.norm1 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.drop_path = DropPath(drop_path) if drop_path else nn.Identity()
        self.norm2 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.ffn = FFN(
            embed_dims,
            int(embed_dims * mlp_ratio),
            act_cfg=act_cfg,
            dropout_layer=dict(type='DropPath', drop_prob=drop_path))

    def _forward(self, x: torch.Tensor,
                 hw_shape: Tuple[int, int]) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor,
                hw_shape: Tuple[int, int]) -> torch.Tensor:
        """``(B, H*W, C)`` tokens on an ``(H, W)`` grid -> same shape."""
        if self.with_cp and x.requires_grad:
            return cp.checkpoint(self._forward, x, hw_shape,
                                 use_reentrant=False)
        return self._forward(x, hw_shape)


class LWABlock(L2ViTBlock):
    """Local Window Attention block.

    ``x = cpe0(x)``; ``x = x + attn(norm1(x))`` in non-overlapping windows
    (the map padded to a multiple of the window, padded tokens taking part
    as the official code has it, then cropped back); ``x = cpe1(x)``;
    ``x = x + mlp(norm2(x))``.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads.
        window_size (int | tuple[int, int]): Window. Default: 7.
        qkv_bias (bool): Default: True.
        **kwargs: :class:`L2ViTBlock` arguments.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 window_size: Union[int, Tuple[int, int]] = 7,
                 qkv_bias: bool = True,
                 **kwargs):
        super().__init__(embed_dims, num_cpe=2, **kwargs)
        self.window_size = to_2tuple_int(window_size)
        self.attn = LocalWindowAttention(embed_dims, num_heads, qkv_bias)

    def _forward(self, x: torch.Tensor,
                 hw_shape: Tuple[int, int]) -> torch.Tensor:
        x = self.cpe[0](x, hw_shape)
        windows, padded_hw = pad_to_multiple(
            self.norm1(x), hw_shape, self.window_size)
        windows = self.attn(window_partition(windows, self.window_size))
        attn = crop_tokens(
            window_reverse(windows, padded_hw, self.window_size), hw_shape)
        x = x + self.drop_path(attn)
        x = self.cpe[1](x, hw_shape)
        return self.ffn(self.norm2(x), identity=x)


class LGABlock(L2ViTBlock):
    """Linear Global Attention block, with the Local Concentration Module.

    ``x = cpe0(x)``; ``x = x + attn(norm1(x))`` over the whole map;
    ``x = x + lcm(norm3(x))``; ``x = x + mlp(norm2(x))``.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads.
        qkv_bias (bool): Default: True.
        denominator_min (float): Clamp of the linear attention's
            normaliser. Default: 100.
        lcm_kernel_size (int): Kernel of the LCM convolutions. Default: 7.
        **kwargs: :class:`L2ViTBlock` arguments.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 qkv_bias: bool = True,
                 denominator_min: float = 100.,
                 lcm_kernel_size: int = 7,
                 norm_cfg: dict = dict(type='LN'),
                 **kwargs):
        super().__init__(embed_dims, num_cpe=1, norm_cfg=norm_cfg, **kwargs)
        self.attn = LinearGlobalAttention(embed_dims, num_heads, qkv_bias,
                                          denominator_min)
        self.norm3 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.local_mp = LocalConcentrationModule(embed_dims, lcm_kernel_size)

    def _forward(self, x: torch.Tensor,
                 hw_shape: Tuple[int, int]) -> torch.Tensor:
        x = self.cpe[0](x, hw_shape)
        x = x + self.drop_path(self.attn(self.norm1(x)))
        x = x + self.drop_path(self.local_mp(self.norm3(x), hw_shape))
        return self.ffn(self.norm2(x), identity=x)


@register_model
class L2ViT(VitAttnBackbone):
    """L2ViT backbone: LWA and LGA blocks in alternation.

    Layout (paper Table 13): a convolutional stem to stride 4, then four
    stages, each but the first opened by a LayerNorm + 2x2 stride-2 conv;
    stage ``i`` holds ``depths[i]`` blocks alternating LWA, LGA, LWA, LGA...
    Every output index gets its own LayerNorm (``norm{i}``), and outputs are
    NCHW maps.

    Any input size works: the stem and the downsampling layers pad odd maps
    at the bottom/right and the window attention pads to a multiple of the
    window, cropping back, exactly as the official code. There is no
    position embedding (CPE follows the running map), so the backbone has no
    ``pretrain_img_size``.

    Args:
        arch (str | dict): 'tiny', 'small', 'base' (or 't', 's', 'b'), or a
            dict with ``embed_dims``, ``depths`` and ``num_heads`` (one per
            stage). Default: 'tiny'.
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
        with_cp (bool): Gradient checkpointing per block (BatchNorm
            statistics of the LCM then update twice per step).
            Default: False.
        frozen_stages (int): Freeze the stem and stages ``0..frozen_stages``
            (with their downsampling and output norms); -1 freezes nothing.
            Default: -1.
        norm_eval (bool): Keep the BatchNorms of the stem and the LCMs in
            eval mode. Default: False.
        init_cfg (dict, optional): ``dict(type='Pretrained', checkpoint=...,
            state_dict_key=None | 'model' | 'model_ema')`` loads official
            or converted weights. Default: None.

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
                 with_cp: bool = False,
                 frozen_stages: int = -1,
                 norm_eval: bool = False,
                 init_cfg: Optional[dict] = None):
        super().__init__(frozen_stages, norm_eval, init_cfg)
        arch = self.parse_arch(arch)
        embed_dims, depths = arch['embed_dims'], arch['depths']
        num_stages = len(depths)
        for key in ('embed_dims', 'num_heads'):
            if len(arch[key]) != num_stages:
                raise ValueError(f'arch {key} needs one entry per stage')
        self.embed_dims = embed_dims
        self.out_indices = self.normalize_out_indices(out_indices,
                                                      num_stages)
        # Below one stride of the last stage, its tokens would be padding.
        self.min_input_size = 4 * 2**(num_stages - 1)

        self.downsample_layers = ModuleList([
            ConvStem(in_channels, embed_dims[0], conv_norm_cfg,
                     norm_cfg=norm_cfg)
        ] + [
            ConvDownsample(embed_dims[i - 1], embed_dims[i], norm_cfg)
            for i in range(1, num_stages)
        ])

        rates = linear_drop_path_rates(drop_path_rate, sum(depths))
        self.stages = ModuleList()
        for i, depth in enumerate(depths):
            blocks = ModuleList()
            for j in range(depth):
                common = dict(
                    embed_dims=embed_dims[i],
                    num_heads=arch['num_heads'][i],
                    qkv_bias=qkv_bias,
                    mlp_ratio=mlp_ratio,
                    drop_path=rates[sum(depths[:i]) + j],
                    norm_cfg=norm_cfg,
                    with_cp=with_cp)
                if j % 2 == 0:
                    blocks.append(LWABlock(window_size=window_size, **common))
                else:
                    blocks.append(
                        LGABlock(denominator_min=denominator_min,
                                 lcm_kernel_size=lcm_kernel_size,
                                 **common))
            self.stages.append(blocks)

        for i in self.out_indices:
            self.add_module(f'norm{i}',
                            build_norm_layer(norm_cfg, embed_dims[i])[1])
        self.apply(self._init_weights)
        use_traceable_padding(self)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        """The official ImageNet initialisation: truncated normal (0.02)
        for linear and conv weights, zero biases; norms at 1 / 0."""
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            trunc_normal_(module.weight, std=.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        self.check_input_size(x)
        outs = []
        for i, blocks in enumerate(self.stages):
            if i == 0:
                x, hw_shape = self.downsample_layers[0](x)
            else:
                x, hw_shape = self.downsample_layers[i](x, hw_shape)
            for block in blocks:
                x = block(x, hw_shape)
            if i in self.out_indices:
                out = getattr(self, f'norm{i}')(x)
                outs.append(nlc_to_nchw(out, hw_shape))
        return tuple(outs)

    def _freeze_stages(self) -> None:
        for i in range(min(self.frozen_stages + 1, len(self.stages))):
            freeze_module(self.downsample_layers[i])
            freeze_module(self.stages[i])
            if i in self.out_indices:
                freeze_module(getattr(self, f'norm{i}'))

    def init_weights(self) -> None:
        # The official training script also pickles its argparse.Namespace
        # (plain option values) under 'args'; allow exactly that type for
        # this weights-only load.
        with torch.serialization.safe_globals([argparse.Namespace]):
            super().init_weights()

    @classmethod
    def convert_checkpoint(cls, state_dict: StateDict) -> StateDict:
        """Official L2ViT keys -> ours; other layouts pass through.

        Renamed: the stem's ``downsample_layers.0.proj.proj.{0,1,3,4}`` ->
        ``downsample_layers.0.{conv1,norm1,conv2,norm2}``; ``mlp.fc1`` /
        ``mlp.fc2`` -> mmcv FFN's ``ffn.layers.0.0`` / ``ffn.layers.1``;
        the LCM's ``local_mp.bn`` -> ``local_mp.norm`` (so one ``'norm'``
        rule covers every norm in optimizer configs); the classifier's final
        ``norm`` -> ``norm{last stage}``. Every other name is the official
        one. ``head.*`` is left for the classifier.
        """
        if not any('.mlp.fc1.' in k or '.proj.proj.' in k
                   for k in state_dict):
            return state_dict
        num_stages = 1 + max(
            (int(k.split('.')[1])
             for k in state_dict if re.match(r'stages\.\d+\.', k)),
            default=3)
        converted = OrderedDict()
        for key, value in state_dict.items():
            for pattern, replacement in _OFFICIAL_RENAMES:
                key = re.sub(pattern, replacement, key)
            if key.startswith('norm.'):
                key = f'norm{num_stages - 1}.' + key[len('norm.'):]
            converted[key] = value
        return converted


#: Official name patterns -> ours (applied to every key, in order).
_OFFICIAL_RENAMES = (
    (r'^downsample_layers\.0\.proj\.proj\.0\.', 'downsample_layers.0.conv1.'),
    (r'^downsample_layers\.0\.proj\.proj\.1\.', 'downsample_layers.0.norm1.'),
    (r'^downsample_layers\.0\.proj\.proj\.3\.', 'downsample_layers.0.conv2.'),
    (r'^downsample_layers\.0\.proj\.proj\.4\.', 'downsample_layers.0.norm2.'),
    (r'\.mlp\.fc1\.', '.ffn.layers.0.0.'),
    (r'\.mlp\.fc2\.', '.ffn.layers.1.'),
    (r'\.local_mp\.bn\.', '.local_mp.norm.'),
)
