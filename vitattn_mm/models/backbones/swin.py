"""One Swin skeleton for every attention, and Swin's window attention.

:class:`AttnSwinTransformer` is the Swin Transformer of mmdet, mmseg and
mmpretrain (same keywords, same weight names, same results) whose
attention is chosen per stage or per block: by default Swin's
:class:`WindowMSA` in shifted windows (:class:`WindowedAttention`), or any
registered attention, in windows or over the whole map.
"""
import re
from collections import OrderedDict
from typing import Callable, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmengine.model import ModuleList
from mmengine.model.weight_init import trunc_normal_

from ...registry import ATTENTIONS, register_model
from ..layers import (QueryAttention, Stage, StagedBackbone, StateDict,
                      TokenAttention,
                      TransformerBlock, WindowedAttention, attention_class,
                      build_attention, check_heads, check_type,
                      gather_relative_position_bias, grid_after_stride,
                      init_linear_and_norm, linear_drop_path_rates,
                      migrate_conv1x1_ffn, pass_on, relative_position_index,
                      resize_pos_embed, resolve_attn_cfgs, softmax_attention,
                      split_heads, to_2tuple_int, window_mask_bias)
from ..layers.padding import CornerPatchEmbed, CornerPatchMerging


@ATTENTIONS.register_module()
class WindowMSA(TokenAttention):
    """Swin's window attention: ``softmax(q k^T * scale + B + mask) v`` in
    one window, ``B`` the learned relative position bias.

    mmdet's and mmpretrain's ``WindowMSA`` on the attention protocol, with
    their parameters (``qkv``, ``proj``, ``relative_position_bias_table``
    and the saved ``relative_position_index``) and their results. Run it
    in windows with :class:`WindowedAttention`.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads.
        window_size (int | tuple[int, int]): The window it is run in.
        qkv_bias (bool): Bias in ``qkv``. Default: True.
        qk_scale (float, optional): Overrides ``head_dims ** -0.5``.
            Default: None.
        attn_drop (float): Dropout of the attention weights. Default: 0.
        proj_drop (float): Dropout after ``proj``. Default: 0.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """
    takes_mask = True

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 window_size: Union[int, Tuple[int, int]],
                 qkv_bias: bool = True,
                 qk_scale: Optional[float] = None,
                 attn_drop: float = 0.,
                 proj_drop: float = 0.,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        head_dims = check_heads(embed_dims, num_heads)
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.window_size = to_2tuple_int(window_size)
        self.scale = qk_scale or head_dims**-0.5
        wh, ww = self.window_size
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * wh - 1) * (2 * ww - 1), num_heads))
        # Saved in checkpoints, as mmdet and mmpretrain save it.
        self.register_buffer('relative_position_index',
                             relative_position_index(self.window_size))
        self.qkv = nn.Linear(embed_dims, embed_dims * 3, bias=qkv_bias)
        self.attn_drop = attn_drop
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)
        trunc_normal_(self.relative_position_bias_table, std=0.02)

    def _qkv(self, x: torch.Tensor):
        return (split_heads(t, self.num_heads)
                for t in self.qkv(x).chunk(3, dim=-1))

    def forward(self,
                x: torch.Tensor,
                hw_shape: Tuple[int, int],
                mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``(B * num_windows, wh * ww, C)`` windows -> same shape; ``mask``
        is Swin's ``(num_windows, N, N)`` shift mask."""
        B, N, C = x.shape
        bias = gather_relative_position_bias(self.relative_position_bias_table,
                                             self.relative_position_index)
        bias, q, k, v = window_mask_bias(mask, bias, *self._qkv(x))
        out = softmax_attention(
            q, k, v, bias, self.scale,
            dropout_p=self.attn_drop if self.training else 0.)
        out = out.reshape(B, self.num_heads, N, -1).transpose(1, 2)
        return self.proj_drop(self.proj(out.reshape(B, N, C)))

    @torch.no_grad()
    def query_attention(self, x: torch.Tensor, hw_shape: Tuple[int, int],
                        index: int) -> QueryAttention:
        """The softmax weights of query ``index`` over its window (the
        relative position bias included)."""
        q, k, _ = (t[0] for t in self._qkv(x[:1]))
        bias = gather_relative_position_bias(self.relative_position_bias_table,
                                             self.relative_position_index)
        logits = (q[:, index:index + 1] * self.scale) @ k.transpose(-2, -1)
        logits = logits[:, 0] + bias[:, index]
        return QueryAttention(logits.softmax(-1), tuple(hw_shape),
                              q[:, index], k, self.scale)

    def extra_repr(self) -> str:
        return (f'embed_dims={self.embed_dims}, num_heads={self.num_heads}, '
                f'window_size={self.window_size}')


#: Swin's attention in the stages that name none.
SWIN_ATTENTION = dict(type='WindowedAttention', window_msa='WindowMSA')


@register_model
class AttnSwinTransformer(StagedBackbone):
    """Swin Transformer whose attention is chosen per stage or block.

    The Swin of mmdet, mmseg and mmpretrain: their keywords and defaults,
    their weight names (a stock Swin's state dict loads strictly) and their
    results when no attention is swapped. Patch embedding, then four
    stages of pre-norm blocks, each but the last ended by a 2x2 patch
    merging; output ``i`` through its own norm ``norm{i}``.

    Defaults that differ between the stock classes follow the running
    config's scope: ``out_indices`` and ``pad_small_map`` are mmpretrain's
    (``(3,)``, False) in an mmpretrain config, mmdet's (``(0, 1, 2, 3)``,
    True) elsewhere. ``drop_rate`` means what it means in mmdet (dropout
    after the patch embedding, in the attention projection and the FFN);
    ``frozen_stages`` too (see :class:`StagedBackbone`).

    Args:
        arch (str | dict): 'tiny', 'small', 'base', 'large' (or 't', 's',
            'b', 'l'), or a dict with ``embed_dims`` (int), ``depths`` and
            ``num_heads`` (one per stage). Default: 'tiny'.
        attn_cfgs (dict | list, optional): The attention of every stage (a
            dict), of each stage (a list; None is Swin's) or of each block
            (a list in the list). ``dict(type='ShiftWindowMSA',
            window_msa=NAME, **kwargs)`` (or ``'WindowedAttention'``) runs
            the registered attention NAME in Swin's shifted windows (the
            skeleton sets the window, the shift of odd blocks and
            ``pad_small_map``); any other type runs over the whole map.
            Default: None (Swin everywhere).
        pretrain_img_size (int | tuple[int, int]): Input size of the
            pretrained weights: sizes absolute position embeddings and the
            grid token attentions learn positional encodings on (mmdet's
            name; mmpretrain's is ``img_size``). Default: 224.
        in_channels (int): Input channels. Default: 3.
        patch_size (int): Stem patch size. Default: 4.
        window_size (int): Window of the shifted-window stages. Default: 7.
        mlp_ratio (float): FFN hidden channels / C. Default: 4.
        qkv_bias (bool): Bias in the attention projections. Default: True.
        qk_scale (float, optional): Window attention scale override
            (mmdet). Default: None.
        patch_norm (bool): LayerNorm after the patch embedding (mmdet).
            Default: True.
        drop_rate (float): Dropout (see above). Default: 0.
        attn_drop_rate (float): Dropout of the attention weights.
            Default: 0.
        drop_path_rate (float): Stochastic depth rate. Default: 0.1.
        out_indices (Sequence[int] | int, optional): Output stages.
            Default: None (by scope, see above).
        use_abs_pos_embed (bool): Learned absolute position embedding
            (``absolute_pos_embed``), resized to the running grid.
            Default: False.
        interpolate_mode (str): How it is resized (mmpretrain).
            Default: 'bicubic'.
        pad_small_map (bool, optional): Pad maps smaller than a window and
            shift a map of one window (dense prediction); False follows the
            original classifiers (mmpretrain). Default: None (by scope).
        act_cfg (dict): FFN activation. Default: ``dict(type='GELU')``.
        norm_cfg (dict): Norm layers. Default: ``dict(type='LN')``.
        embed_dims, depths, num_heads: mmdet's names for the arch; given,
            they override the named arch's values. Default: None.
        strides (Sequence[int]): mmdet's stage strides; only
            ``(patch_size, 2, 2, 2)`` is supported. Default: None.
        img_size (int | tuple[int, int], optional): mmpretrain's name for
            ``pretrain_img_size``. Default: None.
        patch_cfg (dict, optional): mmpretrain's overrides of the patch
            embedding (mmcv ``PatchEmbed`` arguments). Default: None.
        stage_cfgs (dict, optional): mmpretrain's per-stage block settings;
            only an empty one (give ``attn_cfgs`` instead). Default: None.
        out_after_downsample (bool): mmpretrain's; only False.
            Default: False.
        convert_weights (bool): mmdet's switch for official Swin files;
            accepted, official layouts are always converted. Default: False.
        **kwargs: :class:`StagedBackbone`'s ``frozen_stages``,
            ``norm_eval``, ``with_cp``, ``pretrained`` and ``init_cfg``.
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
    scope_defaults = {
        None: dict(out_indices=(0, 1, 2, 3), pad_small_map=True),
        'mmpretrain': dict(out_indices=(3, ), pad_small_map=False),
    }

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 attn_cfgs: Optional[Union[dict, Sequence]] = None,
                 pretrain_img_size: Union[int, Tuple[int, int]] = 224,
                 in_channels: int = 3,
                 patch_size: int = 4,
                 window_size: int = 7,
                 mlp_ratio: float = 4.,
                 qkv_bias: bool = True,
                 qk_scale: Optional[float] = None,
                 patch_norm: bool = True,
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0.1,
                 out_indices: Optional[Union[int, Sequence[int]]] = None,
                 use_abs_pos_embed: bool = False,
                 interpolate_mode: str = 'bicubic',
                 pad_small_map: Optional[bool] = None,
                 act_cfg: dict = dict(type='GELU'),
                 norm_cfg: dict = dict(type='LN'),
                 embed_dims: Optional[int] = None,
                 depths: Optional[Sequence[int]] = None,
                 num_heads: Optional[Sequence[int]] = None,
                 strides: Optional[Sequence[int]] = None,
                 img_size: Optional[Union[int, Tuple[int, int]]] = None,
                 patch_cfg: Optional[dict] = None,
                 stage_cfgs: Optional[dict] = None,
                 out_after_downsample: bool = False,
                 convert_weights: bool = False,
                 **kwargs):
        arch = self.resolve_arch(arch, embed_dims, depths, num_heads)
        num_stages = len(arch['depths'])
        super().__init__(
            num_stages, self.scope_default('out_indices', out_indices), **kwargs)
        if strides is not None and tuple(strides) != (
                patch_size, ) + (2, ) * (num_stages - 1):
            raise ValueError(f'strides {tuple(strides)}: Swin merges 2x2 '
                             f'patches, so only ({patch_size}, 2, 2, ...) '
                             'is supported')
        if stage_cfgs:
            raise ValueError('stage_cfgs (mmpretrain\'s per-stage block '
                             'settings) is not supported: give attn_cfgs, '
                             'window_size, mlp_ratio ...')
        if out_after_downsample:
            raise ValueError('out_after_downsample=True is not supported')
        if img_size is not None:
            if pretrain_img_size not in (224, img_size):
                raise ValueError('give img_size or pretrain_img_size, not '
                                 'both')
            pretrain_img_size = img_size
        for name, value in (('qkv_bias', qkv_bias), ('patch_norm', patch_norm),
                            ('use_abs_pos_embed', use_abs_pos_embed),
                            ('convert_weights', convert_weights)):
            check_type(name, value, bool)
        pad_small_map = self.scope_default('pad_small_map', pad_small_map)
        self.embed_dims = arch['embed_dims']
        self.depths = list(arch['depths'])
        self.num_heads = list(arch['num_heads'])
        self.window_size = window_size
        self.pad_small_map = pad_small_map
        self.num_features = [self.embed_dims * 2**i for i in range(num_stages)]
        self.interpolate_mode = interpolate_mode

        self.patch_embed = CornerPatchEmbed(**dict(
            dict(in_channels=in_channels,
                 embed_dims=self.embed_dims,
                 conv_type='Conv2d',
                 kernel_size=patch_size,
                 stride=patch_size,
                 norm_cfg=norm_cfg if patch_norm else None),
            **(patch_cfg or {})))
        img_size = to_2tuple_int(pretrain_img_size)
        self.patch_resolution = grid_after_stride(img_size, patch_size)
        self.use_abs_pos_embed = use_abs_pos_embed
        if use_abs_pos_embed:
            self.absolute_pos_embed = nn.Parameter(
                torch.zeros(1, self.patch_resolution[0] *
                            self.patch_resolution[1], self.embed_dims))
            trunc_normal_(self.absolute_pos_embed, std=0.02)
        self.drop_after_pos = nn.Dropout(drop_rate)

        cfgs = resolve_attn_cfgs(attn_cfgs, self.depths, SWIN_ATTENTION)
        rates = linear_drop_path_rates(drop_path_rate, sum(self.depths))
        grid = self.patch_resolution
        self.min_input_size = patch_size * 2**(num_stages - 1)
        for i, depth in enumerate(self.depths):
            dims = self.num_features[i]
            blocks = ModuleList()
            for j in range(depth):
                attn = self.window_settings(
                    cfgs[i][j], shift=j % 2 == 1, qkv_bias=qkv_bias,
                    qk_scale=qk_scale, attn_drop=attn_drop_rate,
                    proj_drop=drop_rate)
                blocks.append(TransformerBlock(
                    dims,
                    build_attention(
                        attn, context=dict(grid_size=grid),
                        embed_dims=dims, num_heads=self.num_heads[i],
                        qkv_bias=qkv_bias),
                    ffn_ratio=mlp_ratio,
                    drop_path=rates[sum(self.depths[:i]) + j],
                    ffn_drop=drop_rate,
                    act_cfg=act_cfg,
                    norm_cfg=norm_cfg))
                if self.is_window_attention(attn) and not pad_small_map:
                    # The stage's map must hold a whole window.
                    stride = patch_size * 2**i
                    self.min_input_size = max(
                        self.min_input_size, stride * (window_size - 1) + 1)
            downsample = None
            if i < num_stages - 1:
                downsample = CornerPatchMerging(
                    in_channels=dims, out_channels=2 * dims,
                    norm_cfg=norm_cfg)
                grid = grid_after_stride(grid, 2)
            self.stages.append(Stage(blocks, downsample=downsample))
        self.add_output_norms(self.num_features,
                              lambda c: build_norm_layer(norm_cfg, c)[1])
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
    def is_window_attention(cfg: dict) -> bool:
        return issubclass(attention_class(cfg['type']), WindowedAttention)

    def window_settings(self, cfg: dict, shift: bool, **values) -> dict:
        """A block's attention config with what the skeleton decides: for
        Swin's windows the window, the shift of odd blocks and
        ``pad_small_map``; for every attention the dropouts, scale and bias
        it takes (a non-zero one it cannot take raises)."""
        if not self.is_window_attention(cfg):
            qkv_bias = values.pop('qkv_bias')
            pass_on(cfg, attention_class(cfg['type']), **values)
            cfg.setdefault('qkv_bias', qkv_bias)
            return cfg
        cfg.setdefault('window_size', self.window_size)
        cfg.setdefault('pad_small_map', self.pad_small_map)
        if 'shift_size' not in cfg:
            cfg.setdefault('shift', shift)
        inner = attention_class(cfg.get('window_msa', 'WindowMSA'))
        return pass_on(cfg, inner, **values)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        init_linear_and_norm(module)

    # ----------------------------------------------------------- forward
    def forward_stem(self, x: torch.Tensor):
        x, hw_shape = self.patch_embed(x)
        if self.use_abs_pos_embed:
            x = x + resize_pos_embed(self.absolute_pos_embed,
                                     self.patch_resolution, hw_shape,
                                     self.interpolate_mode)
        return self.drop_after_pos(x), hw_shape

    def stem_modules(self):
        return [self.patch_embed]

    def frozen_parameters(self):
        return [self.absolute_pos_embed] if self.use_abs_pos_embed else []

    # ----------------------------------------------------------- weights
    @classmethod
    def convert_checkpoint(cls, state_dict: StateDict) -> StateDict:
        """Official Swin keys -> ours (see :func:`convert_official_swin`)."""
        return convert_official_swin(state_dict)

    def migrate_keys(self, state_dict: dict, prefix: str = '') -> None:
        """Layouts of earlier versions and of mmdet / mmpretrain -> ours.

        * vitattn_mm 0.1 MSF-Swin: ``downsamples.{i}`` ->
          ``stages.{i}.downsample``, ``stages.{i}.{j}`` ->
          ``stages.{i}.blocks.{j}``; FLatten-Swin: the patch merging sat
          before its stage (``stages.{i}.downsample`` ->
          ``stages.{i-1}.downsample``) and the FLatten blocks' FFN was two
          1x1 convs (now mmcv's Linear ``FFN``);
        * mmpretrain's version-1 final ``norm`` -> ``norm{last}``, and its
          ``attn_mask`` buffers dropped;
        * mmdet's ``(1, C, H, W)`` absolute position embedding ->
          ``(1, H*W, C)``.
        """
        p = re.escape(prefix)
        keys = [k for k in state_dict if k.startswith(prefix)]
        merging_before_stage = (
            any(k.startswith(f'{prefix}stages.1.downsample.') for k in keys)
            and not any(k.startswith(f'{prefix}stages.0.downsample.')
                        for k in keys))
        for key in keys:
            if key.endswith('attn_mask'):
                del state_dict[key]
                continue
            new = re.sub(rf'^{p}downsamples\.(\d+)\.', lambda m:
                         f'{prefix}stages.{m.group(1)}.downsample.', key)
            new = re.sub(rf'^{p}stages\.(\d+)\.(\d+)\.',
                         rf'{prefix}stages.\1.blocks.\2.', new)
            new = re.sub(rf'^{p}norm\.', f'{prefix}norm{self.num_stages - 1}.',
                         new)
            if merging_before_stage:
                new = re.sub(
                    rf'^{p}stages\.(\d+)\.downsample\.', lambda m:
                    f'{prefix}stages.{int(m.group(1)) - 1}.downsample.', new)
            if new != key:
                state_dict[new] = state_dict.pop(key)
        pos = state_dict.get(prefix + 'absolute_pos_embed')
        if pos is not None and pos.dim() == 4:
            state_dict[prefix + 'absolute_pos_embed'] = pos.flatten(
                2).transpose(1, 2)
        migrate_conv1x1_ffn(state_dict, prefix)


BlockConverter = Callable[[str, str, torch.Tensor], StateDict]

#: Official Swin-block names -> ours (``attn.w_msa`` in the windows).
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


def convert_official_swin(
        state_dict: StateDict,
        convert_other_block: Optional[BlockConverter] = None,
        is_other_block: Callable[[str], bool] = lambda names: False
) -> StateDict:
    """Official Swin keys (microsoft/Swin-Transformer, FLatten-Swin) ->
    ours; other layouts pass through unchanged.

    ``layers.{i}.blocks.{j}`` -> ``stages.{i}.blocks.{j}`` (Swin blocks as
    mmdet names them), ``layers.{i}.downsample`` -> ``stages.{i}.downsample``
    (reordered for mmcv's unfold), ``patch_embed.proj`` ->
    ``patch_embed.projection``, ``norm`` -> ``norm{last}``. The derived
    ``attn_mask`` buffers are dropped; ``head.*`` is left for the
    classifier.

    Args:
        state_dict (dict): The file's tensors.
        convert_other_block (callable, optional): ``(prefix, name, value)``
            -> our tensors, for blocks that are not Swin's (FLatten's).
        is_other_block (callable): Whether a block, given the official
            names of its tensors joined by spaces, goes to
            ``convert_other_block``. Default: none does.
    """
    if not any(k.startswith('layers.') for k in state_dict):
        return state_dict
    block_names = {}
    for key in state_dict:
        m = re.match(r'(layers\.\d+\.blocks\.\d+)\.(.+)', key)
        if m:
            block_names.setdefault(m.group(1), []).append(m.group(2))
    other = {block for block, names in block_names.items()
             if convert_other_block and is_other_block(' '.join(names))}
    num_stages = 1 + max(
        int(k.split('.')[1]) for k in state_dict if k.startswith('layers.'))
    converted = OrderedDict()
    for key, value in state_dict.items():
        if key.endswith('attn_mask'):
            continue
        m = re.match(r'layers\.(\d+)\.downsample\.(reduction|norm)\.(.+)', key)
        if m:
            stage, part, name = int(m.group(1)), m.group(2), m.group(3)
            converted[f'stages.{stage}.downsample.{part}.{name}'] = \
                _merging_weight_to_unfold_order(value)
            continue
        m = re.match(r'(layers\.(\d+)\.blocks\.(\d+))\.(.+)', key)
        if m:
            block, name = m.group(1), m.group(4)
            prefix = f'stages.{m.group(2)}.blocks.{m.group(3)}.'
            if block in other:
                converted.update(convert_other_block(prefix, name, value))
            else:
                converted[prefix + _SWIN_BLOCK_NAMES.get(name, name)] = value
            continue
        if key.startswith('patch_embed.proj.'):
            key = key.replace('patch_embed.proj.', 'patch_embed.projection.')
        elif key.startswith('norm.'):
            key = f'norm{num_stages - 1}.' + key[len('norm.'):]
        converted[key] = value
    return converted


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
