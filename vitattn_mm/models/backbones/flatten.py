"""FLatten Transformer: focused linear attention in DeiT, Swin, PVT, PVTv2
and CSwin.

Han et al., "FLatten Transformer: Vision Transformer using Focused Linear
Attention", ICCV 2023 (https://arxiv.org/abs/2308.00442). The official
repository (LeapLabTHU/FLatten-Transformer) is classification only; this
module follows its released checkpoints' formulation exactly and adds what
dense prediction needs: any input size, NCHW multi-scale outputs and
loading of the official files (:meth:`convert_checkpoint`).
"""
import re
from typing import Optional, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import build_norm_layer
from mmdet.models.layers import nchw_to_nlc, nlc_to_nchw

from ...registry import ATTENTIONS, register_model
from ..layers import (QueryAttention, ResizablePosEmbed, StateDict,
                      TokenAttention, check_heads, split_heads, to_2tuple_int)
from ..layers.padding import grid_after_stride
from .cswin import AttnCSwinTransformer, convert_official_cswin
from .pvt import AttnPVT, AttnPVTv2, convert_official_pvt, convert_pvt_block
from .swin import AttnSwinTransformer, convert_official_swin
from .vit import NO_CLS_TOKEN_SCOPE_DEFAULTS, AttnViT


@ATTENTIONS.register_module()
class FocusedLinearAttention(TokenAttention):
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

    In windows (:class:`~vitattn_mm.models.layers.WindowedAttention`,
    unshifted: a linear attention takes no mask) the grid is the window's,
    and so is the positional encoding.

    With ``lepe`` (FLatten-CSwin) CSwin's locally-enhanced positional
    encoding is added too: a 3x3 depthwise conv over all C channels of
    ``v`` on the (H, W) grid, its output added before ``proj`` beside the
    depthwise-conv branch.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads; C must be divisible by it.
        grid_size (tuple[int, int]): Token grid the positional encoding is
            learned on (the pretraining map). Other grids get it resized
            bilinearly.
        sr_ratio (int): Spatial-reduction ratio of keys and values.
            Default: 1 (every released model).
        qkv_bias (bool): Bias in the q / kv projections. Default: True.
        focusing_factor (float): p of the focusing function. Default: 3.
        kernel_size (int): Depthwise conv kernel. Default: 5.
        lepe (bool): Add CSwin's LePE (``lepe``: 3x3 depthwise conv of
            ``v``); needs ``sr_ratio=1``. Default: False.
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
                 lepe: bool = False,
                 proj_drop: float = 0.,
                 norm_cfg: dict = dict(type='LN'),
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        self.head_dims = check_heads(embed_dims, num_heads)
        if lepe and sr_ratio > 1:
            raise ValueError('lepe needs values on the query grid, so '
                             f'sr_ratio must be 1, got {sr_ratio}')
        self.embed_dims = embed_dims
        self.num_heads = num_heads
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
        self.lepe = nn.Conv2d(embed_dims, embed_dims, 3, padding=1,
                              groups=embed_dims) if lepe else None
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

    def feature_map(self, x: torch.Tensor) -> torch.Tensor:
        """The kernel of queries and keys (fp32): ``ReLU + 1e-6``, divided
        by ``softplus(scale)``, focused."""
        scale = F.softplus(self.scale.float())
        return self.focus((F.relu(x.float()) + 1e-6) / scale)

    def attend(self, q: torch.Tensor, k: torch.Tensor,
               v: torch.Tensor) -> torch.Tensor:
        """Linear attention of ``(B, N, C)`` q and ``(B, n, C)`` k, v."""
        B, N, C = q.shape
        dtype = v.dtype
        with torch.autocast(q.device.type, enabled=False):
            q, k = self.feature_map(q), self.feature_map(k)
            q, k, v = (split_heads(t, self.num_heads)
                       for t in (q, k, v.float()))
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
        q, k, v, kv_hw = self._project(x, hw_shape)
        out = self.attend(q, k, v)

        v = nlc_to_nchw(v, kv_hw)
        if self.sr_ratio > 1:
            v = F.interpolate(v, size=hw_shape, mode='bilinear',
                              align_corners=False)
        if self.lepe is not None:
            out = out + nchw_to_nlc(self.lepe(v))
        # One depthwise kernel for every head: heads go into the batch.
        v = v.reshape(B * self.num_heads, self.head_dims, *hw_shape)
        out = out + self.dwc(v).reshape(B, C, N).transpose(1, 2)
        return self.proj_drop(self.proj(out))

    def _project(self, x: torch.Tensor, hw_shape: Tuple[int, int]):
        """q, k (positional encoding added), v and the key grid."""
        q = self.q(x)
        if self.sr_ratio > 1:
            reduced = self.sr(nlc_to_nchw(x, hw_shape))
            kv_hw = tuple(reduced.shape[-2:])
            kv = self.kv(self.norm(nchw_to_nlc(reduced)))
        else:
            kv_hw = tuple(hw_shape)
            kv = self.kv(x)
        k, v = kv.chunk(2, dim=-1)
        return q, k + self.positional_encoding(kv_hw), v, kv_hw

    @torch.no_grad()
    def query_attention(self, x: torch.Tensor, hw_shape: Tuple[int, int],
                        index: int) -> QueryAttention:
        """Focused linear weights ``phi(q_i) phi(k)^T / sum`` of query
        ``index`` over the whole map (the depthwise-conv branch is not an
        attention distribution and is left out)."""
        q, k, _, kv_hw = self._project(x[:1], hw_shape)
        qf, kf = (split_heads(self.feature_map(t), self.num_heads)[0]
                  for t in (q, k))
        sim = (qf[:, index:index + 1] @ kf.transpose(-2, -1))[:, 0]
        q, k = (split_heads(t.float(), self.num_heads)[0] for t in (q, k))
        return QueryAttention(sim / sim.sum(-1, keepdim=True), kv_hw,
                              q[:, index], k, self.head_dims**-0.5)

    def extra_repr(self) -> str:
        return (f'embed_dims={self.embed_dims}, num_heads={self.num_heads}, '
                f'sr_ratio={self.sr_ratio}, '
                f'focusing_factor={self.focusing_factor}, '
                f'lepe={self.lepe is not None}')


def _in_leading_stages(attn: dict, num_attn_stages: int,
                       num_stages: int) -> list:
    """``attn`` in the first ``num_attn_stages`` stages, the skeleton's own
    attention (None) in the others."""
    if not 0 <= num_attn_stages <= num_stages:
        raise ValueError(f'num_flatten_stages must be in 0..{num_stages}, '
                         f'got {num_attn_stages}')
    return [attn] * num_attn_stages + [None] * (num_stages - num_attn_stages)


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
        settings = self.resolve_arch(arch, kwargs.pop('embed_dims', None),
                                     kwargs.pop('depths', None),
                                     kwargs.pop('num_heads', None))
        num_stages = len(settings['depths'])
        flatten = dict(
            type='FocusedLinearAttention',
            focusing_factor=focusing_factor,
            kernel_size=kernel_size)
        if 'attn_cfgs' not in kwargs:
            stages = _in_leading_stages(flatten, num_flatten_stages,
                                        num_stages)
            if flatten_window_size is not None:
                img = kwargs.get('img_size') or kwargs.get(
                    'pretrain_img_size', 224)
                grid = grid_after_stride(to_2tuple_int(img),
                                         kwargs.get('patch_size', 4))
                for i in range(num_flatten_stages):
                    window = tuple(min(flatten_window_size, g) for g in grid)
                    stages[i] = dict(
                        flatten, type='WindowedAttention',
                        window_msa='FocusedLinearAttention',
                        window_size=window, shift=False)
                    grid = grid_after_stride(grid, 2)
            kwargs['attn_cfgs'] = stages
        super().__init__(arch=settings, **kwargs)
        self.num_flatten_stages = num_flatten_stages

    @classmethod
    def convert_checkpoint(cls, state_dict: StateDict) -> StateDict:
        """Official FLatten-Swin keys -> ours (see
        :func:`~vitattn_mm.models.backbones.swin.convert_official_swin`);
        in the FLatten blocks the official ``qkv`` is split into ``q`` /
        ``kv``."""
        return convert_official_swin(
            state_dict, _convert_flatten_block,
            lambda names: 'attn.dwc.weight' in names.split())


def _convert_flatten_block(prefix: str, name: str, value: torch.Tensor,
                           conv_ffn: bool = False) -> StateDict:
    """One official FLatten-block tensor -> ours (``prefix`` + our name).

    Swin's fused ``attn.qkv`` becomes ``attn.q`` (first C rows) and
    ``attn.kv``; the learned encoding a parameter of its module; the MLP as
    in PVT's blocks (:func:`convert_pvt_block`).
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
        **kwargs: :class:`AttnPVT` arguments (mmdet's ``num_layers``,
            ``embed_dims`` ..., ``pretrain_img_size``, ``sr_ratios``
            (default 1 everywhere), ``drop_path_rate``, ``out_indices``,
            ``out_norm`` (default True), ``with_cp``, ``frozen_stages``,
            ``init_cfg``...).
    """

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 focusing_factor: float = 3,
                 kernel_size: int = 5,
                 **kwargs):
        kwargs.setdefault(
            'attn_cfgs',
            dict(type='FocusedLinearAttention',
                 focusing_factor=focusing_factor,
                 kernel_size=kernel_size))
        for key, value in dict(sr_ratios=(1, 1, 1, 1),
                               paddings=('corner', ) * 4, out_norm=True,
                               patch_norm_cfg=dict(type='LN')).items():
            kwargs.setdefault(key, value)
        super().__init__(arch=arch, **kwargs)

    @classmethod
    def convert_checkpoint(cls, state_dict: StateDict) -> StateDict:
        """Official FLatten-PVT / PVTv2 keys -> ours (see
        :func:`~vitattn_mm.models.backbones.pvt.convert_official_pvt`);
        the learned encodings become parameters of their modules."""
        return convert_official_pvt(state_dict, _convert_flatten_block)


@register_model
class FLattenPVTv2(FLattenPVT, AttnPVTv2):
    """FLatten-PVTv2: PVTv2 with focused linear attention in every block.

    :class:`AttnPVTv2` (overlapping patch embeddings, a depthwise conv in
    every FFN, a norm closing every stage) with
    :class:`FocusedLinearAttention`. Arguments as :class:`FLattenPVT`; arch
    'b0' ... 'b4'.
    """

    def __init__(self, arch: Union[str, dict] = 'b0', **kwargs):
        kwargs.setdefault('paddings', (3, 1, 1, 1))
        kwargs.setdefault('out_norm', False)
        super().__init__(arch=arch, **kwargs)


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
        settings = self.parse_arch(arch)
        flatten = dict(
            type='FocusedLinearAttention',
            focusing_factor=focusing_factor,
            kernel_size=kernel_size,
            lepe=True)
        kwargs.setdefault(
            'attn_cfgs',
            _in_leading_stages(flatten, num_flatten_stages,
                               len(settings['depths'])))
        super().__init__(arch=settings, **kwargs)
        self.num_flatten_stages = num_flatten_stages

    @classmethod
    def convert_checkpoint(cls, state_dict: StateDict) -> StateDict:
        """Official FLatten-CSwin keys -> ours (see
        :func:`~vitattn_mm.models.backbones.cswin.convert_official_cswin`);
        in the FLatten blocks the block's ``qkv`` becomes ``attn.q`` /
        ``attn.kv``, ``proj`` ``attn.proj``, ``attns.0.get_v``
        ``attn.lepe`` and ``attns.0.*`` ``attn.*``."""
        return convert_official_cswin(
            state_dict, _convert_flatten_cswin_block,
            lambda names: 'attns.0.dwc.weight' in names.split())


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
        arch (str | dict): 'tiny' (or 't', 'ti', 'deit-tiny', 'deit-t'),
            or a dict with ``embed_dims``, ``depth`` and ``num_heads``.
            Default: 'tiny'.
        focusing_factor (float): p of the focusing function. Default: 3.
        kernel_size (int): Depthwise conv kernel of the attention.
            Default: 5.
        **kwargs: :class:`AttnViT` arguments (``patch_size``, ``img_size``,
            ``qkv_bias``, ``out_indices``, ``out_type``,
            ``drop_path_rate``, ``with_cp``, ``frozen_stages``,
            ``init_cfg``...).
    """
    arch_zoo = {
        ('t', 'ti', 'tiny', 'deit-t', 'deit-tiny'):
        dict(embed_dims=192, depth=12, num_heads=3),
    }
    scope_defaults = NO_CLS_TOKEN_SCOPE_DEFAULTS

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 focusing_factor: float = 3,
                 kernel_size: int = 5,
                 **kwargs):
        kwargs.setdefault(
            'attn_cfgs',
            dict(type='FocusedLinearAttention',
                 focusing_factor=focusing_factor,
                 kernel_size=kernel_size))
        for key, value in dict(with_cls_token=False, final_norm=False,
                               out_norm=True,
                               norm_cfg=dict(type='LN', eps=1e-6),
                               patch_bias=True,
                               interpolate_mode='bilinear').items():
            kwargs.setdefault(key, value)
        super().__init__(arch=arch, **kwargs)


def _convert_flatten_cswin_block(prefix: str, name: str,
                                 value: torch.Tensor) -> StateDict:
    """One official FLatten-CSwin block tensor -> ours."""
    for pattern, repl in ((r'(qkv|proj)\.', r'attn.\1.'),
                          (r'attns\.0\.get_v\.', 'attn.lepe.'),
                          (r'attns\.0\.', 'attn.')):
        name, found = re.subn('^' + pattern, repl, name)
        if found:
            break
    return _convert_flatten_block(prefix, name, value)
