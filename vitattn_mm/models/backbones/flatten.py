"""FLatten Transformer: focused linear attention in Swin, PVT and PVTv2.

Han et al., "FLatten Transformer: Vision Transformer using Focused Linear
Attention", ICCV 2023 (https://arxiv.org/abs/2308.00442). The official
repository (LeapLabTHU/FLatten-Transformer) is classification only; this
module follows its released checkpoints' formulation exactly and adds what
dense prediction needs: any input size, NCHW multi-scale outputs and
loading of the official files (:meth:`convert_checkpoint`).
"""
import math
import re
from collections import OrderedDict
from typing import Dict, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint as cp
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks import DropPath
from mmcv.cnn.bricks.transformer import PatchEmbed, PatchMerging
from mmdet.models.backbones.pvt import MixFFN
from mmdet.models.layers import nchw_to_nlc, nlc_to_nchw
from mmengine.model import BaseModule, ModuleDict, ModuleList
from mmengine.model.weight_init import trunc_normal_
from mmpretrain.models.backbones.swin_transformer import SwinBlock
from mmpretrain.models.utils.attention import WindowMSA

from ...registry import register_model
from ..layers import (ResizablePosEmbed, VitAttnBackbone, crop_tokens,
                      freeze_module, init_linear_and_norm,
                      linear_drop_path_rates, pad_to_multiple, to_2tuple_int,
                      use_traceable_padding, window_partition, window_reverse)

StateDict = Dict[str, torch.Tensor]


class FocusedLinearAttention(BaseModule):
    """Focused linear attention with depthwise-conv rank restoration.

    As the released FLatten checkpoints compute it: a learned positional
    encoding is added to the keys only; queries and keys go through
    ``ReLU + 1e-6``, are divided by ``softplus(scale)`` and focused,
    ``f_p(x) = ||x|| / ||x**p|| * x**p``, over all C channels (before the
    heads are split). Per head, with n keys,

    ``out = (q @ ((k^T n^-0.5) @ (v n^-0.5))) / (q @ mean_n(k) + 1e-6)``,

    i.e. ``k^T v`` first (linear in the number of tokens); the mean / n^-0.5
    scaling keeps the products small. A depthwise ``kernel_size`` conv, one
    kernel shared by all heads, runs over ``v`` on the real (H, W) grid and
    is added before ``proj``.

    The feature map and the products run in fp32 with autocast off: under
    fp16, ``x**3`` and the norms over- and underflow. The projections and
    the conv keep the caller's precision.

    With ``sr_ratio > 1`` keys and values come from a strided conv + norm
    of the map (PVT's spatial reduction); ``v`` is upsampled back to (H, W)
    bilinearly for the depthwise conv.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads; C must be divisible by it.
        grid_size (tuple[int, int]): Token grid the positional encoding is
            learned on (the pretraining map, or the window). Other grids get
            it resized bilinearly.
        sr_ratio (int): Spatial-reduction ratio of keys and values.
            Default: 1 (every released model).
        qkv_bias (bool): Bias in the q / kv projections. Default: True.
        focusing_factor (float): p of the focusing function. Default: 3.
        kernel_size (int): Depthwise conv kernel. Default: 5.
        proj_drop (float): Dropout after ``proj``. Default: 0.
        norm_cfg (dict): Norm after the spatial reduction.
            Default: ``dict(type='LN')``.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 grid_size: Tuple[int, int],
                 sr_ratio: int = 1,
                 qkv_bias: bool = True,
                 focusing_factor: float = 3,
                 kernel_size: int = 5,
                 proj_drop: float = 0.,
                 norm_cfg: dict = dict(type='LN'),
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        if embed_dims % num_heads:
            raise ValueError(f'embed_dims {embed_dims} is not divisible by '
                             f'num_heads {num_heads}')
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.head_dims = embed_dims // num_heads
        self.sr_ratio = sr_ratio
        self.focusing_factor = focusing_factor

        self.q = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
        self.kv = nn.Linear(embed_dims, embed_dims * 2, bias=qkv_bias)
        if sr_ratio > 1:
            self.sr = nn.Conv2d(embed_dims, embed_dims, sr_ratio, sr_ratio)
            self.norm = build_norm_layer(norm_cfg, embed_dims)[1]
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)
        self.dwc = nn.Conv2d(self.head_dims, self.head_dims, kernel_size,
                             padding=kernel_size // 2, groups=self.head_dims)
        # softplus(0) = ln 2: the official initialisation.
        self.scale = nn.Parameter(torch.zeros(1, 1, embed_dims))
        key_grid = tuple(max(s // sr_ratio, 1) for s in grid_size)
        self.positional_encoding = ResizablePosEmbed(
            embed_dims, key_grid, init_std=0.)

    def focus(self, x: torch.Tensor) -> torch.Tensor:
        """``f_p``: raise to the power p, keep each token's norm."""
        norm = x.norm(dim=-1, keepdim=True)
        x = x**self.focusing_factor
        return x / x.norm(dim=-1, keepdim=True) * norm

    def attend(self, q: torch.Tensor, k: torch.Tensor,
               v: torch.Tensor) -> torch.Tensor:
        """Linear attention of ``(B, N, C)`` q and ``(B, n, C)`` k, v."""
        B, N, C = q.shape
        dtype = v.dtype
        with torch.autocast(q.device.type, enabled=False):
            q, k, v = q.float(), k.float(), v.float()
            scale = F.softplus(self.scale.float())
            q = self.focus((F.relu(q) + 1e-6) / scale)
            k = self.focus((F.relu(k) + 1e-6) / scale)
            q, k, v = (t.reshape(B, -1, self.num_heads,
                                 self.head_dims).transpose(1, 2)
                       for t in (q, k, v))
            n = k.shape[-2]
            z = 1 / (q @ k.mean(dim=-2, keepdim=True).transpose(-2, -1) +
                     1e-6)
            kv = (k.transpose(-2, -1) * n**-0.5) @ (v * n**-0.5)
            out = q @ kv * z
        return out.transpose(1, 2).reshape(B, N, C).to(dtype)

    def forward(self, x: torch.Tensor,
                hw_shape: Tuple[int, int]) -> torch.Tensor:
        """``(B, H*W, C)`` tokens on an ``(H, W)`` grid -> same shape."""
        B, N, C = x.shape
        q = self.q(x)
        if self.sr_ratio > 1:
            reduced = self.sr(nlc_to_nchw(x, hw_shape))
            kv_hw = tuple(reduced.shape[-2:])
            kv = self.kv(self.norm(nchw_to_nlc(reduced)))
        else:
            kv_hw = tuple(hw_shape)
            kv = self.kv(x)
        k, v = kv.chunk(2, dim=-1)
        k = k + self.positional_encoding(kv_hw)
        out = self.attend(q, k, v)

        v = nlc_to_nchw(v, kv_hw)
        if self.sr_ratio > 1:
            v = F.interpolate(v, size=hw_shape, mode='bilinear',
                              align_corners=False)
        # One depthwise kernel for every head: heads go into the batch.
        v = v.reshape(B * self.num_heads, self.head_dims, *hw_shape)
        out = out + self.dwc(v).reshape(B, C, N).transpose(1, 2)
        return self.proj_drop(self.proj(out))

    def extra_repr(self) -> str:
        return (f'embed_dims={self.embed_dims}, num_heads={self.num_heads}, '
                f'sr_ratio={self.sr_ratio}, '
                f'focusing_factor={self.focusing_factor}')


class FLattenBlock(BaseModule):
    """Pre-norm transformer block with focused linear attention.

    ``x + attn(norm1(x))`` then ``x + ffn(norm2(x))``. The attention covers
    the whole (unpadded) map by default, or non-overlapping windows of
    ``window_size`` (maps padded to a multiple, then cropped back).

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads.
        grid_size (tuple[int, int]): The stage's token grid at pretraining
            size (ignored in window mode: the window is the grid).
        window_size (tuple[int, int], optional): Attention window; None
            attends over the whole map. Default: None.
        sr_ratio (int): Spatial reduction of keys/values. Default: 1.
        ffn_ratio (float): FFN hidden channels / C. Default: 4.
        use_conv_ffn (bool): 3x3 depthwise conv inside the FFN (PVTv2).
            Default: False.
        qkv_bias (bool): Bias in q / kv. Default: True.
        focusing_factor (float): Default: 3.
        kernel_size (int): Depthwise conv kernel of the attention. Default: 5.
        drop_path (float): Stochastic depth rate. Default: 0.
        act_cfg (dict): FFN activation. Default: ``dict(type='GELU')``.
        norm_cfg (dict): Norm layers. Default: ``dict(type='LN')``.
        with_cp (bool): Gradient checkpointing of the block. Default: False.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 grid_size: Tuple[int, int],
                 window_size: Optional[Tuple[int, int]] = None,
                 sr_ratio: int = 1,
                 ffn_ratio: float = 4.,
                 use_conv_ffn: bool = False,
                 qkv_bias: bool = True,
                 focusing_factor: float = 3,
                 kernel_size: int = 5,
                 drop_path: float = 0.,
                 act_cfg: dict = dict(type='GELU'),
                 norm_cfg: dict = dict(type='LN'),
                 with_cp: bool = False,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        self.window_size = window_size
        self.with_cp = with_cp
        self.norm1 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.attn = FocusedLinearAttention(
            embed_dims,
            num_heads,
            grid_size=window_size or grid_size,
            sr_ratio=sr_ratio,
            qkv_bias=qkv_bias,
            focusing_factor=focusing_factor,
            kernel_size=kernel_size)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm2 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.ffn = MixFFN(
            embed_dims,
            int(embed_dims * ffn_ratio),
            act_cfg=act_cfg,
            dropout_layer=dict(type='DropPath', drop_prob=drop_path),
            use_conv=use_conv_ffn)

    def _attention(self, x: torch.Tensor,
                   hw_shape: Tuple[int, int]) -> torch.Tensor:
        if self.window_size is None:
            return self.attn(x, hw_shape)
        x, padded_hw = pad_to_multiple(x, hw_shape, self.window_size)
        windows = self.attn(window_partition(x, self.window_size),
                            self.window_size)
        x = window_reverse(windows, padded_hw, self.window_size)
        return crop_tokens(x, hw_shape)

    def forward(self, x: torch.Tensor,
                hw_shape: Tuple[int, int]) -> torch.Tensor:

        def _inner_forward(x):
            x = x + self.drop_path(self._attention(self.norm1(x), hw_shape))
            return self.ffn(self.norm2(x), hw_shape, identity=x)

        if self.with_cp and x.requires_grad:
            return cp.checkpoint(_inner_forward, x, use_reentrant=False)
        return _inner_forward(x)


def _grid_after(size: Tuple[int, int], stride: int) -> Tuple[int, int]:
    """Token grid after a stride-``stride`` patch embedding / merging with
    adaptive (corner) padding."""
    return tuple(math.ceil(s / stride) for s in size)


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


@register_model
class FLattenSwinTransformer(VitAttnBackbone):
    """FLatten-Swin: focused linear attention in the first Swin stages.

    Stages ``< num_flatten_stages`` use :class:`FLattenBlock` (no shift, no
    relative position bias); the others are Swin's shifted-window blocks
    (mmpretrain's ``SwinBlock``). By default the FLatten stages attend over
    the whole unpadded map, their positional encodings resized from the
    pretraining grid (at 224 the official model's 56x56 "window" is the
    whole stage-1 map); ``flatten_window_size`` keeps fixed windows instead.

    Args:
        arch (str | dict): 'tiny', 'small', 'base' (or 't', 's', 'b'), or a
            dict with keys ``embed_dims`` (int), ``depths`` and
            ``num_heads`` (one per stage). Default: 'tiny'.
        pretrain_img_size (int | tuple[int, int]): Input size the weights
            were trained on; sizes the positional encodings. Default: 224.
        in_channels (int): Input channels. Default: 3.
        patch_size (int): Stem patch size. Default: 4.
        window_size (int): Window of the Swin stages. Default: 7.
        num_flatten_stages (int): Leading stages with focused linear
            attention. Default: 2.
        flatten_window_size (int, optional): Window of the FLatten stages;
            None attends over the whole map. A window never exceeds the
            stage's pretraining grid, as in the official code (56 gives 56
            in stage 1 and 28 in stage 2 at 224). Default: None.
        mlp_ratio (float): FFN hidden channels / C. Default: 4.
        qkv_bias (bool): Bias in the q/k/v projections. Default: True.
        focusing_factor (float): p of the focusing function. Default: 3.
        kernel_size (int): Depthwise conv kernel of the FLatten attention.
            Default: 5.
        drop_path_rate (float): Stochastic depth rate. Default: 0.1.
        out_indices (Sequence[int] | int): Output stages. Default:
            (0, 1, 2, 3).
        pad_small_map (bool): Swin stages pad maps smaller than the window
            (and keep shifting). False follows the official classification
            behaviour (a map equal to the window is not shifted) and needs
            maps of at least one window. Default: True.
        norm_cfg (dict): Norm layers. Default: ``dict(type='LN')``.
        with_cp (bool): Gradient checkpointing per block. Default: False.
        frozen_stages (int): Stages to freeze (-1: none). Default: -1.
        norm_eval (bool): Keep BatchNorm in eval mode. Default: False.
        init_cfg (dict, optional): ``dict(type='Pretrained', checkpoint=...)``
            loads official or converted weights. Default: None.
    """
    arch_zoo = {
        ('t', 'tiny'):
        dict(embed_dims=96, depths=[2, 2, 6, 2], num_heads=[3, 6, 12, 24]),
        ('s', 'small'):
        dict(embed_dims=96, depths=[2, 2, 18, 2], num_heads=[3, 6, 12, 24]),
        ('b', 'base'):
        dict(embed_dims=128, depths=[2, 2, 18, 2], num_heads=[4, 8, 16, 32]),
    }
    arch_keys = ('embed_dims', 'depths', 'num_heads')

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 pretrain_img_size: Union[int, Tuple[int, int]] = 224,
                 in_channels: int = 3,
                 patch_size: int = 4,
                 window_size: int = 7,
                 num_flatten_stages: int = 2,
                 flatten_window_size: Optional[int] = None,
                 mlp_ratio: float = 4.,
                 qkv_bias: bool = True,
                 focusing_factor: float = 3,
                 kernel_size: int = 5,
                 drop_path_rate: float = 0.1,
                 out_indices: Union[int, Sequence[int]] = (0, 1, 2, 3),
                 pad_small_map: bool = True,
                 norm_cfg: dict = dict(type='LN'),
                 with_cp: bool = False,
                 frozen_stages: int = -1,
                 norm_eval: bool = False,
                 init_cfg: Optional[dict] = None):
        super().__init__(frozen_stages, norm_eval, init_cfg)
        arch = self.parse_arch(arch)
        depths, num_heads = arch['depths'], arch['num_heads']
        num_stages = len(depths)
        if len(num_heads) != num_stages:
            raise ValueError('depths and num_heads need one entry per stage')
        embed_dims = [arch['embed_dims'] * 2**i for i in range(num_stages)]
        self.embed_dims = embed_dims
        self.num_flatten_stages = num_flatten_stages
        self.out_indices = self.normalize_out_indices(out_indices,
                                                      num_stages)
        self.min_input_size = patch_size * 2**(num_stages - 1)

        self.patch_embed = PatchEmbed(
            in_channels=in_channels,
            embed_dims=embed_dims[0],
            conv_type='Conv2d',
            kernel_size=patch_size,
            stride=patch_size,
            norm_cfg=norm_cfg)

        grid = _grid_after(to_2tuple_int(pretrain_img_size), patch_size)
        drop_paths = linear_drop_path_rates(drop_path_rate, sum(depths))
        self.stages = ModuleList()
        for i, depth in enumerate(depths):
            stage = ModuleDict()
            if i > 0:
                stage['downsample'] = PatchMerging(
                    embed_dims[i - 1], embed_dims[i], norm_cfg=norm_cfg)
                grid = _grid_after(grid, 2)
            if i < num_flatten_stages:
                window = None if flatten_window_size is None else tuple(
                    min(flatten_window_size, g) for g in grid)
                blocks = [
                    FLattenBlock(
                        embed_dims[i],
                        num_heads[i],
                        grid_size=grid,
                        window_size=window,
                        ffn_ratio=mlp_ratio,
                        qkv_bias=qkv_bias,
                        focusing_factor=focusing_factor,
                        kernel_size=kernel_size,
                        drop_path=drop_paths[sum(depths[:i]) + j],
                        norm_cfg=norm_cfg,
                        with_cp=with_cp) for j in range(depth)
                ]
            else:
                blocks = [
                    SwinBlock(
                        embed_dims[i],
                        num_heads[i],
                        window_size=window_size,
                        shift=j % 2 == 1,
                        ffn_ratio=mlp_ratio,
                        drop_path=drop_paths[sum(depths[:i]) + j],
                        pad_small_map=pad_small_map,
                        attn_cfgs=dict(qkv_bias=qkv_bias),
                        norm_cfg=norm_cfg,
                        with_cp=with_cp) for j in range(depth)
                ]
            stage['blocks'] = ModuleList(blocks)
            self.stages.append(stage)

        for i in self.out_indices:
            self.add_module(f'norm{i}',
                            build_norm_layer(norm_cfg, embed_dims[i])[1])
        self.apply(self._init_weights)
        use_traceable_padding(self)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        init_linear_and_norm(module)
        if isinstance(module, WindowMSA):
            trunc_normal_(module.relative_position_bias_table, std=.02)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        self.check_input_size(x)
        x, hw_shape = self.patch_embed(x)
        outs = []
        for i, stage in enumerate(self.stages):
            if 'downsample' in stage:
                x, hw_shape = stage['downsample'](x, hw_shape)
            for block in stage['blocks']:
                x = block(x, hw_shape)
            if i in self.out_indices:
                out = getattr(self, f'norm{i}')(x)
                outs.append(nlc_to_nchw(out, hw_shape))
        return tuple(outs)

    def _freeze_stages(self) -> None:
        if self.frozen_stages < 0:
            return
        freeze_module(self.patch_embed)
        for i in range(min(self.frozen_stages + 1, len(self.stages))):
            freeze_module(self.stages[i])
            if i in self.out_indices:
                freeze_module(getattr(self, f'norm{i}'))

    @classmethod
    def convert_checkpoint(cls, state_dict: StateDict) -> StateDict:
        """Official FLatten-Swin keys -> ours; other layouts pass through.

        ``layers.{i}.blocks.{j}`` -> ``stages.{i}.blocks.{j}`` (the official
        ``qkv`` of FLatten blocks split into ``q`` / ``kv``, their MLP as
        1x1 convs; Swin blocks as mmpretrain names them),
        ``layers.{i}.downsample`` -> ``stages.{i+1}.downsample`` (reordered
        for mmcv's unfold), ``norm`` -> ``norm3``. The derived
        ``attn_mask`` buffers are dropped; ``head.*`` is left for the
        classifier.
        """
        if not any(k.startswith('layers.') for k in state_dict):
            return state_dict
        flatten_blocks = {
            m.group(1)
            for m in (re.match(r'(layers\.\d+\.blocks\.\d+)\.attn\.dwc\.',
                               k) for k in state_dict) if m
        }
        num_stages = 1 + max(
            int(k.split('.')[1]) for k in state_dict
            if k.startswith('layers.'))
        converted = OrderedDict()
        for key, value in state_dict.items():
            if key.endswith('attn_mask'):
                continue
            m = re.match(r'layers\.(\d+)\.downsample\.(reduction|norm)\.(.+)',
                         key)
            if m:
                stage, part, name = int(m.group(1)), m.group(2), m.group(3)
                converted[f'stages.{stage + 1}.downsample.{part}.{name}'] = \
                    _merging_weight_to_unfold_order(value)
                continue
            m = re.match(r'(layers\.(\d+)\.blocks\.(\d+))\.(.+)', key)
            if m:
                block, name = m.group(1), m.group(4)
                prefix = f'stages.{m.group(2)}.blocks.{m.group(3)}.'
                if block in flatten_blocks:
                    converted.update(
                        _convert_flatten_block(prefix, name, value))
                else:
                    converted[prefix + _SWIN_BLOCK_NAMES.get(name, name)] = \
                        value
                continue
            if key.startswith('patch_embed.proj.'):
                key = key.replace('patch_embed.proj.',
                                  'patch_embed.projection.')
            elif key.startswith('norm.'):
                key = f'norm{num_stages - 1}.' + key[len('norm.'):]
            converted[key] = value
        return converted


#: Official Swin-block names -> mmpretrain's ``SwinBlock``.
_SWIN_BLOCK_NAMES = {
    'attn.qkv.weight': 'attn.w_msa.qkv.weight',
    'attn.qkv.bias': 'attn.w_msa.qkv.bias',
    'attn.proj.weight': 'attn.w_msa.proj.weight',
    'attn.proj.bias': 'attn.w_msa.proj.bias',
    'attn.relative_position_bias_table':
    'attn.w_msa.relative_position_bias_table',
    'attn.relative_position_index': 'attn.w_msa.relative_position_index',
    'mlp.fc1.weight': 'ffn.layers.0.0.weight',
    'mlp.fc1.bias': 'ffn.layers.0.0.bias',
    'mlp.fc2.weight': 'ffn.layers.1.weight',
    'mlp.fc2.bias': 'ffn.layers.1.bias',
}


def _convert_flatten_block(prefix: str, name: str, value: torch.Tensor,
                           fc2_index: int = 3) -> StateDict:
    """One official FLatten-block tensor -> ours (``prefix`` + our name).

    Swin's fused ``attn.qkv`` becomes ``attn.q`` (first C rows) and
    ``attn.kv``; MLP Linears become MixFFN's 1x1 convs (fc2 at
    ``ffn.layers.{fc2_index}``: 3, or 4 behind PVTv2's depthwise conv).
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
    m = re.match(r'mlp\.(fc1|fc2|dwconv\.dwconv)\.(weight|bias)', name)
    if m:
        layer = {'fc1': 0, 'dwconv.dwconv': 1, 'fc2': fc2_index}[m.group(1)]
        if m.group(1) != 'dwconv.dwconv' and m.group(2) == 'weight':
            value = value[:, :, None, None]
        return {f'{prefix}ffn.layers.{layer}.{m.group(2)}': value}
    return {prefix + name: value}


#: Heads and MLP ratios shared by every PVT / PVTv2 variant; widths of all
#: but PVTv2-b0.
_PVT_HEADS = dict(num_heads=[1, 2, 5, 8], mlp_ratios=[8, 8, 4, 4])
_PVT_WIDTHS = dict(embed_dims=[64, 128, 320, 512], **_PVT_HEADS)


@register_model
class FLattenPVT(VitAttnBackbone):
    """FLatten-PVT: PVT with focused linear attention in every block.

    Each stage: patch embedding (non-overlapping, stride 4 then 2), a learned
    absolute position embedding resized to the running grid, FLatten blocks
    (spatial reduction ``sr_ratios``; 1 in every released model, so the
    attention is global). PVT has no norm between stages and its official
    classifier pools the raw last stage; outputs get a LayerNorm each
    (``out_norm``) for dense prediction.

    Args:
        arch (str | dict): 'tiny', 'small', 'medium', 'large' (or 't', 's',
            'm', 'l'), or a dict with ``embed_dims``, ``depths``,
            ``num_heads`` and ``mlp_ratios`` (one per stage).
            Default: 'tiny'.
        pretrain_img_size (int | tuple[int, int]): Sizes the position
            embeddings and positional encodings. Default: 224.
        in_channels (int): Input channels. Default: 3.
        sr_ratios (Sequence[int]): Spatial-reduction ratio per stage.
            Default: (1, 1, 1, 1).
        qkv_bias (bool): Default: True.
        focusing_factor (float): Default: 3.
        kernel_size (int): Depthwise conv kernel of the attention.
            Default: 5.
        drop_path_rate (float): Stochastic depth rate. Default: 0.1.
        out_indices (Sequence[int] | int): Output stages.
            Default: (0, 1, 2, 3).
        out_norm (bool): A LayerNorm on every output (FLattenPVT only; PVTv2
            normalises every stage on its main path). The classification
            configs turn it off to match the official classifier.
            Default: True.
        norm_cfg (dict): Norms of the blocks (and stage ends).
            Default: ``dict(type='LN', eps=1e-6)``.
        with_cp (bool): Gradient checkpointing per block. Default: False.
        frozen_stages (int): Stages to freeze (-1: none). Default: -1.
        norm_eval (bool): Keep BatchNorm in eval mode. Default: False.
        init_cfg (dict, optional): ``dict(type='Pretrained', checkpoint=...)``
            loads official or converted weights. Default: None.
    """
    arch_zoo = {
        ('t', 'tiny'): dict(depths=[2, 2, 2, 2], **_PVT_WIDTHS),
        ('s', 'small'): dict(depths=[3, 4, 6, 3], **_PVT_WIDTHS),
        ('m', 'medium'): dict(depths=[3, 4, 18, 3], **_PVT_WIDTHS),
        ('l', 'large'): dict(depths=[3, 8, 27, 3], **_PVT_WIDTHS),
    }
    arch_keys = ('embed_dims', 'depths', 'num_heads', 'mlp_ratios')

    # Layout of PVT (v1); FLattenPVTv2 overrides it.
    patch_sizes = (4, 2, 2, 2)
    patch_paddings: Tuple[Union[str, int], ...] = ('corner', ) * 4
    use_abs_pos_embed = True
    use_conv_ffn = False
    norm_after_stage = False

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 pretrain_img_size: Union[int, Tuple[int, int]] = 224,
                 in_channels: int = 3,
                 sr_ratios: Sequence[int] = (1, 1, 1, 1),
                 qkv_bias: bool = True,
                 focusing_factor: float = 3,
                 kernel_size: int = 5,
                 drop_path_rate: float = 0.1,
                 out_indices: Union[int, Sequence[int]] = (0, 1, 2, 3),
                 out_norm: bool = True,
                 norm_cfg: dict = dict(type='LN', eps=1e-6),
                 with_cp: bool = False,
                 frozen_stages: int = -1,
                 norm_eval: bool = False,
                 init_cfg: Optional[dict] = None):
        super().__init__(frozen_stages, norm_eval, init_cfg)
        arch = self.parse_arch(arch)
        embed_dims, depths = arch['embed_dims'], arch['depths']
        num_stages = len(depths)
        for key in ('embed_dims', 'num_heads', 'mlp_ratios'):
            if len(arch[key]) != num_stages:
                raise ValueError(f'arch {key} needs one entry per stage')
        if len(sr_ratios) != num_stages:
            raise ValueError('sr_ratios needs one entry per stage')
        if self.norm_after_stage and not out_norm:
            raise ValueError(f'{type(self).__name__} normalises every stage '
                             'on its main path; out_norm=False is not '
                             'supported')
        self.embed_dims = embed_dims
        self.out_indices = self.normalize_out_indices(out_indices,
                                                      num_stages)
        strides = (4, ) + (2, ) * (num_stages - 1)
        self.min_input_size = math.prod(strides)

        grid = to_2tuple_int(pretrain_img_size)
        drop_paths = linear_drop_path_rates(drop_path_rate, sum(depths))
        self.stages = ModuleList()
        for i, depth in enumerate(depths):
            stage = ModuleDict()
            stage['patch_embed'] = PatchEmbed(
                in_channels=in_channels if i == 0 else embed_dims[i - 1],
                embed_dims=embed_dims[i],
                conv_type='Conv2d',
                kernel_size=self.patch_sizes[i],
                stride=strides[i],
                padding=self.patch_paddings[i],
                norm_cfg=dict(type='LN'))
            grid = _grid_after(grid, strides[i])
            if self.use_abs_pos_embed:
                stage['pos_embed'] = ResizablePosEmbed(embed_dims[i], grid)
            stage['blocks'] = ModuleList([
                FLattenBlock(
                    embed_dims[i],
                    arch['num_heads'][i],
                    grid_size=grid,
                    sr_ratio=sr_ratios[i],
                    ffn_ratio=arch['mlp_ratios'][i],
                    use_conv_ffn=self.use_conv_ffn,
                    qkv_bias=qkv_bias,
                    focusing_factor=focusing_factor,
                    kernel_size=kernel_size,
                    drop_path=drop_paths[sum(depths[:i]) + j],
                    norm_cfg=norm_cfg,
                    with_cp=with_cp) for j in range(depth)
            ])
            if self.norm_after_stage or (out_norm and i in self.out_indices):
                stage['norm'] = build_norm_layer(norm_cfg, embed_dims[i])[1]
            self.stages.append(stage)
        self.apply(self._init_weights)
        use_traceable_padding(self)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        init_linear_and_norm(module)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        self.check_input_size(x)
        outs = []
        for i, stage in enumerate(self.stages):
            x, hw_shape = stage['patch_embed'](x)
            if 'pos_embed' in stage:
                x = x + stage['pos_embed'](hw_shape)
            for block in stage['blocks']:
                x = block(x, hw_shape)
            out = stage['norm'](x) if 'norm' in stage else x
            if self.norm_after_stage:
                x = out
            if i in self.out_indices:
                outs.append(nlc_to_nchw(out, hw_shape))
            x = nlc_to_nchw(x, hw_shape)
        return tuple(outs)

    def _freeze_stages(self) -> None:
        for i in range(min(self.frozen_stages + 1, len(self.stages))):
            freeze_module(self.stages[i])

    @classmethod
    def convert_checkpoint(cls, state_dict: StateDict) -> StateDict:
        """Official FLatten-PVT / PVTv2 keys -> ours; others pass through.

        ``patch_embed{i}`` -> ``stages.{i-1}.patch_embed`` (``proj`` ->
        ``projection``), ``pos_embed{i}`` -> ``stages.{i-1}.pos_embed``,
        ``block{i}.{j}`` -> ``stages.{i-1}.blocks.{j}`` (MLP as MixFFN's
        1x1 convs), PVTv2's ``norm{i}`` -> ``stages.{i-1}.norm``. PVT's
        final ``norm`` is dropped: the official model never applies it, so
        it holds its initial values. ``head.*`` is left for the classifier.
        """
        if not any(re.match(r'block\d+\.', k) for k in state_dict):
            return state_dict
        conv_ffn = any('.mlp.dwconv.' in k for k in state_dict)
        converted = OrderedDict()
        for key, value in state_dict.items():
            if key.startswith('norm.'):
                continue
            m = re.match(r'block(\d+)\.(\d+)\.(.+)', key)
            if m:
                prefix = f'stages.{int(m.group(1)) - 1}.blocks.{m.group(2)}.'
                converted.update(
                    _convert_flatten_block(prefix, m.group(3), value,
                                           fc2_index=4 if conv_ffn else 3))
                continue
            m = re.match(r'(patch_embed|pos_embed|norm)(\d+)(.*)', key)
            if m:
                part, rest = m.group(1), m.group(3)
                if part == 'patch_embed':
                    rest = rest.replace('.proj.', '.projection.')
                elif part == 'pos_embed':
                    rest = '.weight'
                key = f'stages.{int(m.group(2)) - 1}.{part}{rest}'
            converted[key] = value
        return converted


@register_model
class FLattenPVTv2(FLattenPVT):
    """FLatten-PVTv2: PVTv2 with focused linear attention in every block.

    PVTv2's layout: overlapping patch embeddings (7x7 stride 4, then 3x3
    stride 2), a 3x3 depthwise conv inside every FFN, no absolute position
    embedding, and a norm closing every stage on the main path (which is
    also the output norm). Arguments as :class:`FLattenPVT`; arch 'b0' ...
    'b4'.
    """
    arch_zoo = {
        'b0': dict(embed_dims=[32, 64, 160, 256], depths=[2, 2, 2, 2],
                   **_PVT_HEADS),
        'b1': dict(depths=[2, 2, 2, 2], **_PVT_WIDTHS),
        'b2': dict(depths=[3, 4, 6, 3], **_PVT_WIDTHS),
        'b3': dict(depths=[3, 4, 18, 3], **_PVT_WIDTHS),
        'b4': dict(depths=[3, 8, 27, 3], **_PVT_WIDTHS),
    }

    patch_sizes = (7, 3, 3, 3)
    patch_paddings = (3, 1, 1, 1)
    use_abs_pos_embed = False
    use_conv_ffn = True
    norm_after_stage = True

    def __init__(self, arch: Union[str, dict] = 'b0', **kwargs):
        super().__init__(arch=arch, **kwargs)

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
