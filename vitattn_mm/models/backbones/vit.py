"""One plain-ViT skeleton for every attention, and ViT's multi-head
self-attention.

:class:`AttnViT` is mmpretrain's and mmseg's ``VisionTransformer`` (their
keywords, arch names, defaults and results; their state dicts load) whose
attention is chosen per block: by default :class:`MultiheadSelfAttention`,
or any registered attention. A plain ViT is staged by its blocks: stage
``i`` is block ``i``, as ``out_indices`` and ``frozen_stages`` count them.
"""
import math
import re
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmdet.models.layers import nlc_to_nchw
from mmengine.model import ModuleList
from mmengine.model.weight_init import trunc_normal_

from ...registry import ATTENTIONS, register_model
from ..layers import (PixelNormPatchEmbed, QueryAttention, ResizablePosEmbed,
                      Stage, StagedBackbone, TokenAttention, TransformerBlock,
                      attention_class, build_attention, check_heads,
                      check_type, init_linear_and_norm,
                      linear_drop_path_rates, merge_heads, pass_on,
                      resolve_attn_cfgs, sincos_pos_embed_2d,
                      softmax_attention, split_heads, to_2tuple_int,
                      window_mask_bias)
from ..layers.padding import CornerPatchEmbed, grid_after_stride


@ATTENTIONS.register_module(name='LocalWindowAttention')
@ATTENTIONS.register_module()
class MultiheadSelfAttention(TokenAttention):
    """Multi-head self-attention, ``softmax(q k^T / sqrt(d)) v``.

    mmpretrain's ``MultiheadAttention`` on the attention protocol (``qkv``,
    ``proj``; mmseg's ``nn.MultiheadAttention`` weights load through
    :meth:`migrate_keys`). In windows it takes Swin's shift mask; L2ViT's
    local window attention is this module in unshifted windows (also
    registered as ``LocalWindowAttention``).

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads.
        qkv_bias (bool): Bias in ``qkv``. Default: True.
        qk_scale (float, optional): Overrides ``head_dims ** -0.5``.
            Default: None.
        attn_drop (float): Dropout of the attention weights. Default: 0.
        proj_drop (float): Dropout after ``proj``. Default: 0.
        proj_bias (bool): Bias in ``proj``. Default: True.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """
    takes_mask = True
    grid_free = True

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 qkv_bias: bool = True,
                 qk_scale: Optional[float] = None,
                 attn_drop: float = 0.,
                 proj_drop: float = 0.,
                 proj_bias: bool = True,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        head_dims = check_heads(embed_dims, num_heads)
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.scale = qk_scale or head_dims**-0.5
        self.qkv = nn.Linear(embed_dims, embed_dims * 3, bias=qkv_bias)
        self.attn_drop = attn_drop
        self.proj = nn.Linear(embed_dims, embed_dims, bias=proj_bias)
        self.proj_drop = nn.Dropout(proj_drop)

    def _qkv(self, x: torch.Tensor):
        return [split_heads(t, self.num_heads)
                for t in self.qkv(x).chunk(3, dim=-1)]

    def forward(self,
                x: torch.Tensor,
                hw_shape: Tuple[int, int],
                mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``(B, N, C)`` tokens -> same shape (the grid is not needed);
        ``mask``: Swin's ``(num_windows, N, N)`` shift mask in windows."""
        bias, q, k, v = window_mask_bias(mask, None, *self._qkv(x))
        out = softmax_attention(
            q, k, v, bias, self.scale,
            dropout_p=self.attn_drop if self.training else 0.)
        out = out.flatten(0, 1) if mask is not None else out
        return self.proj_drop(self.proj(merge_heads(out)))

    @torch.no_grad()
    def query_attention(self, x: torch.Tensor, hw_shape: Tuple[int, int],
                        index: int) -> QueryAttention:
        """Softmax weights of query ``index`` over the grid's keys."""
        extra = x.shape[1] - hw_shape[0] * hw_shape[1]
        q, k, _ = (t[0] for t in self._qkv(x[:1]))
        logits = (q[:, extra + index:extra + index + 1] *
                  self.scale) @ k.transpose(-2, -1)
        weights = logits[:, 0].softmax(-1)[:, extra:]
        return QueryAttention(weights / weights.sum(-1, keepdim=True),
                              tuple(hw_shape), q[:, extra + index],
                              k[:, extra:], self.scale)

    def migrate_keys(self, state_dict: dict, prefix: str = '') -> None:
        """mmseg's ``nn.MultiheadAttention`` (``attn.in_proj_*``,
        ``attn.out_proj``) -> ``qkv``, ``proj``."""
        for part in ('weight', 'bias'):
            for old, new in (('attn.in_proj_', 'qkv.'),
                             ('attn.out_proj.', 'proj.')):
                value = state_dict.pop(f'{prefix}{old}{part}', None)
                if value is not None:
                    state_dict[f'{prefix}{new}{part}'] = value

    def extra_repr(self) -> str:
        return f'embed_dims={self.embed_dims}, num_heads={self.num_heads}'


#: ViT's attention in the blocks that name none.
VIT_ATTENTION = dict(type='MultiheadSelfAttention')

_DEIT = dict(deit_tiny=dict(embed_dims=192, depth=12, num_heads=3),
             deit_small=dict(embed_dims=384, depth=12, num_heads=6),
             deit_base=dict(embed_dims=768, depth=12, num_heads=12))


@register_model
class AttnViT(StagedBackbone):
    """Vision Transformer whose attention is chosen per block.

    mmpretrain's and mmseg's ``VisionTransformer``: a patch embedding, a
    class token (``with_cls_token``), a learned position embedding resized
    to the running grid (``interpolate_mode``), ``pre_norm``, pre-norm
    blocks, a final norm (``final_norm``, ``ln1``) and outputs by
    ``out_type`` (mmpretrain's ``'cls_token'``, ``'featmap'``,
    ``'avg_featmap'`` through ``ln2``, ``'raw'``; mmseg's feature maps,
    with ``output_cls_token``). Defaults that differ between the two follow
    the running config's scope (mmseg's in an mmseg config, mmpretrain's
    elsewhere): ``final_norm`` (False / True), ``out_type``
    ('featmap' / 'cls_token'), ``norm_cfg`` (LN eps 1e-5 / 1e-6) and
    ``patch_bias`` (False / True). ``frozen_stages=k`` freezes the stem and
    the first k blocks as mmpretrain does (0 freezes nothing).

    Added: any attention per block (``attn_cfgs``), Simple ViT's layout
    (``patch_embed='pixel_norm'``, ``pos_embed='sincos'``), and a norm on
    every output (``out_norm``: ``norm{i}``; for ``'avg_featmap'`` on the
    mean token).

    Args:
        arch (str | dict): 'tiny', 'small', 'base' (or 'ti', 's', 'b'),
            'ss' (6 blocks of 384), mmpretrain's DeiT names ('deit-tiny',
            'deit-small', 'deit-base', or 'deit-t' ...) and 'large', or a
            dict with ``embed_dims``, ``depth`` (or ``num_layers``),
            ``num_heads`` and optionally ``feedforward_channels``.
            mmseg's keywords below override it. Default: 'base'.
        attn_cfgs (dict | list, optional): The attention of every block (a
            dict) or of each block (a list; None is ViT's); the skeleton
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
        norm_cfg (dict, optional): Norm layers. Default: None (by scope).
        act_cfg (dict): FFN activation. Default: ``dict(type='GELU')``.
        final_norm (bool, optional): Norm after the last block, on the main
            path (``ln1``). Default: None (by scope).
        out_type (str, optional): See above. Default: None (by scope).
        with_cls_token (bool): A class token (the attentions must be
            ``grid_free``). Default: True.
        output_cls_token (bool): mmseg's: feature maps come with the class
            token, ``[featmap, cls_token]``. Default: False.
        interpolate_mode (str): How the position embedding is resized.
            Default: 'bicubic'.
        pre_norm (bool): A norm after the position embedding
            (``pre_norm``). Default: False.
        patch_bias (bool, optional): Bias of the patch embedding.
            Default: None (by scope; False with ``pre_norm``).
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
            ``norm_eval``, ``with_cp``, ``pretrained`` and ``init_cfg``.
    """
    arch_zoo = {
        ('ti', 'tiny', 'deit-t', 'deit-tiny'): _DEIT['deit_tiny'],
        'ss': dict(embed_dims=384, depth=6, num_heads=6),
        ('s', 'small', 'deit-s', 'deit-small'): _DEIT['deit_small'],
        ('b', 'base', 'deit-b', 'deit-base'): _DEIT['deit_base'],
        ('l', 'large'): dict(embed_dims=1024, depth=24, num_heads=16),
    }
    arch_keys = ('embed_dims', 'depth', 'num_heads')
    scope_defaults = {
        None: dict(final_norm=True, out_type='cls_token',
                   norm_cfg=dict(type='LN', eps=1e-6), patch_bias=True),
        'mmseg': dict(final_norm=False, out_type='featmap',
                      norm_cfg=dict(type='LN'), patch_bias=False),
    }
    freezes_stem_at_zero = False
    OUT_TYPES = ('cls_token', 'featmap', 'avg_featmap', 'raw')

    def __init__(self,
                 arch: Union[str, dict] = 'base',
                 attn_cfgs: Optional[Union[dict, Sequence]] = None,
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
        arch = self.resolve_arch(arch, embed_dims, num_layers, num_heads)
        depth = arch['depth']
        super().__init__(depth, out_indices, **kwargs)
        final_norm = self.scope_default('final_norm', final_norm)
        out_type = self.scope_default('out_type', out_type)
        norm_cfg = self.scope_default('norm_cfg', norm_cfg)
        patch_bias = self.scope_default('patch_bias',
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
            raise ValueError('output_cls_token=True needs with_cls_token')
        for name, value, supported in (
                ('layer_cfgs', layer_cfgs, not layer_cfgs),
                ('layer_scale_init_value', layer_scale_init_value,
                 not layer_scale_init_value), ('num_fcs', num_fcs,
                                               num_fcs == 2),
                ('out_origin', out_origin, not out_origin)):
            if not supported:
                raise ValueError(f'{name}={value!r} is not supported')
        if pretrain_img_size is not None:
            img_size = pretrain_img_size
        self.embed_dims = embed_dims = arch['embed_dims']
        self.num_features = [embed_dims] * depth
        self.out_type = out_type
        self.final_norm = final_norm
        self.with_cls_token = with_cls_token
        self.output_cls_token = output_cls_token
        self.num_extra_tokens = int(with_cls_token)
        self.out_norm = out_norm
        self.min_input_size = patch_size
        if mlp_ratio is None:
            mlp_ratio = arch.get('feedforward_channels',
                                 4 * embed_dims) / embed_dims

        if patch_embed == 'conv':
            self.patch_embed = CornerPatchEmbed(**dict(
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
            self.patch_embed = PixelNormPatchEmbed(in_channels, embed_dims,
                                                   patch_size, norm_cfg)
        self.patch_resolution = grid_after_stride(to_2tuple_int(img_size),
                                                  patch_size)
        if with_cls_token:
            self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dims))
        self.pos_embed = None
        if pos_embed == 'learned':
            self.pos_embed = ResizablePosEmbed(
                embed_dims, self.patch_resolution, mode=interpolate_mode,
                num_extra_tokens=self.num_extra_tokens)
        self.drop_after_pos = nn.Dropout(drop_rate)
        self.pre_norm = build_norm_layer(norm_cfg, embed_dims)[1] \
            if pre_norm else None

        cfgs = resolve_attn_cfgs(attn_cfgs, [1] * depth, VIT_ATTENTION)
        rates = linear_drop_path_rates(drop_path_rate, depth)
        for i in range(depth):
            cfg = pass_on(cfgs[i][0], attention_class(cfgs[i][0]['type']),
                          attn_drop=attn_drop_rate, proj_drop=drop_rate)
            attn = build_attention(
                cfg, context=dict(grid_size=self.patch_resolution),
                embed_dims=embed_dims, num_heads=arch['num_heads'],
                qkv_bias=qkv_bias)
            if with_cls_token and not attn.grid_free:
                raise ValueError(
                    f'with_cls_token=True: {type(attn).__name__} works on '
                    'the token grid and cannot take a class token; set '
                    'with_cls_token=False')
            self.stages.append(Stage(ModuleList([TransformerBlock(
                embed_dims, attn,
                ffn_ratio=mlp_ratio,
                drop_path=rates[i],
                ffn_drop=drop_rate,
                act_cfg=act_cfg,
                norm_cfg=norm_cfg)])))
        if final_norm:
            self.ln1 = build_norm_layer(norm_cfg, embed_dims)[1]
        if out_norm:
            self.add_output_norms(self.num_features,
                                  lambda c: build_norm_layer(norm_cfg, c)[1])
        elif out_type == 'avg_featmap':
            self.ln2 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.apply(self._init_weights)
        if with_cls_token:
            trunc_normal_(self.cls_token, std=.02)
        if 'all' not in frozen_exclude:
            # mmseg's: freeze everything but the excluded names.
            for name, param in self.named_parameters():
                if not any(exclude in name for exclude in frozen_exclude):
                    param.requires_grad = False

    @classmethod
    def resolve_arch(cls, arch, embed_dims=None, num_layers=None,
                     num_heads=None) -> dict:
        """The arch settings (mmpretrain's ``num_layers`` accepted for
        ``depth``), mmseg's keywords overriding them."""
        if isinstance(arch, dict) and 'num_layers' in arch:
            arch = dict(arch)
            arch['depth'] = arch.pop('num_layers')
        settings = cls.parse_arch(arch)
        for key, value in (('embed_dims', embed_dims), ('depth', num_layers),
                           ('num_heads', num_heads)):
            if value is not None:
                settings[key] = value
        return settings

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        init_linear_and_norm(module)

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
            x = x + self.pos_embed(hw_shape).to(x.dtype)
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
        return [m for m in (self.patch_embed, self.pos_embed, self.pre_norm)
                if m is not None]

    def frozen_parameters(self):
        return [self.cls_token] if self.with_cls_token else []

    def final_modules(self):
        return [getattr(self, name) for name in ('ln1', 'ln2')
                if hasattr(self, name)]

    # ----------------------------------------------------------- weights
    def migrate_keys(self, state_dict: dict, prefix: str = '') -> None:
        """mmpretrain's and mmseg's layouts and our 0.2 layout -> ours.

        ``layers.{i}`` (both) -> ``stages.{i}.blocks.0`` with ``ln1`` /
        ``ln2`` -> ``norm1`` / ``norm2`` (mmseg's fused attention is split
        by :meth:`MultiheadSelfAttention.migrate_keys`); their
        ``pos_embed`` -> ``pos_embed.weight`` (a class-token row dropped
        without a class token), mmseg's ``ln_pre`` -> ``pre_norm``; 0.2's
        ``blocks.{i}`` -> ``stages.{i}.blocks.0``.
        """
        p = re.escape(prefix)
        for key in [k for k in state_dict if k.startswith(prefix)]:
            new = re.sub(rf'^{p}layers\.(\d+)\.ln([12])\.',
                         rf'{prefix}stages.\1.blocks.0.norm\2.', key)
            new = re.sub(rf'^{p}(?:layers|blocks)\.(\d+)\.',
                         rf'{prefix}stages.\1.blocks.0.', new)
            new = re.sub(rf'^{p}ln_pre\.', f'{prefix}pre_norm.', new)
            if new == f'{prefix}pos_embed':
                new += '.weight'
            if new != key:
                state_dict[new] = state_dict.pop(key)
        if not self.with_cls_token:
            # Stock files hold a class token (and its position) even where
            # it is not used (mmseg's with_cls_token=False).
            state_dict.pop(prefix + 'cls_token', None)
            pos = state_dict.get(prefix + 'pos_embed.weight')
            if pos is not None and pos.dim() == 3:
                n = pos.shape[1]
                if math.isqrt(n - 1)**2 == n - 1 and math.isqrt(n)**2 != n:
                    state_dict[prefix + 'pos_embed.weight'] = pos[:, 1:]


#: ViT families without a class token: their outputs by scope (feature
#: maps; the mean token in mmpretrain, whose classifiers read a vector).
NO_CLS_TOKEN_SCOPE_DEFAULTS = {
    None: dict(AttnViT.scope_defaults[None], out_type='featmap'),
    'mmpretrain': dict(out_type='avg_featmap'),
}
