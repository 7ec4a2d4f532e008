"""One PVT / PVTv2 skeleton for every token attention.

Each stage: a patch embedding (PVT: non-overlapping, stride 4 then 2;
PVTv2: overlapping 7x7 / 3x3), PVT's learned absolute position embedding
resized to the running grid (v1 only), then the shared pre-norm
:class:`TransformerBlock` around the stage's registered token attention
(``attn_cfgs``), and a LayerNorm (``stages.{i}.norm``) on the outputs (v1)
or closing every stage on the main path (v2). mmdet's PVT cannot take
another attention; this one takes any.
"""
import math
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks.transformer import PatchEmbed
from mmdet.models.layers import nlc_to_nchw
from mmengine.model import ModuleDict, ModuleList

from ...registry import register_model
from ..layers import (ResizablePosEmbed, StateDict, TransformerBlock,
                      VitAttnBackbone, build_attention, freeze_module,
                      grid_after_stride, init_linear_and_norm,
                      linear_drop_path_rates, migrate_conv1x1_ffn,
                      per_block_attention, per_stage_attention,
                      to_2tuple_int)

#: Heads and MLP ratios shared by every PVT / PVTv2 variant; widths of all
#: but PVTv2-b0.
PVT_HEADS = dict(num_heads=[1, 2, 5, 8], mlp_ratios=[8, 8, 4, 4])
PVT_WIDTHS = dict(embed_dims=[64, 128, 320, 512], **PVT_HEADS)


@register_model
class AttnPVT(VitAttnBackbone):
    """Pyramid Vision Transformer whose attention is chosen per stage.

    Args:
        arch (str | dict): 'tiny', 'small', 'medium', 'large' (or 't', 's',
            'm', 'l'), or a dict with ``embed_dims``, ``depths``,
            ``num_heads`` and ``mlp_ratios`` (one per stage).
            Default: 'tiny'.
        attn_cfgs (dict | Sequence[dict | Sequence[dict]]): The registered
            token attention of every stage (a dict), of each stage (a list),
            or of each block (a list of lists); the skeleton
            adds ``embed_dims``, ``num_heads``, ``grid_size`` (the stage's
            pretraining grid), ``qkv_bias`` and, where ``sr_ratios`` asks
            for one, ``sr_ratio``.
            Default: ``dict(type='FocusedLinearAttention')``.
        pretrain_img_size (int | tuple[int, int]): Sizes the position
            embeddings and the attentions' positional encodings.
            Default: 224.
        in_channels (int): Input channels. Default: 3.
        sr_ratios (Sequence[int]): Spatial-reduction ratio per stage.
            Default: (1, 1, 1, 1).
        qkv_bias (bool): Default: True.
        drop_path_rate (float): Stochastic depth rate. Default: 0.1.
        out_indices (Sequence[int] | int): Output stages.
            Default: (0, 1, 2, 3).
        out_norm (bool): A LayerNorm on every output (PVT only; PVTv2
            normalises every stage on its main path). Classification turns
            it off to match the official classifiers. Default: True.
        norm_cfg (dict): Norms of the blocks (and stage ends).
            Default: ``dict(type='LN', eps=1e-6)``.
        with_cp (bool): Gradient checkpointing per block. Default: False.
        frozen_stages (int): Freeze stages ``0..frozen_stages`` (-1: none).
            Default: -1.
        norm_eval (bool): Keep BatchNorm in eval mode. Default: False.
        init_cfg (dict, optional): ``dict(type='Pretrained', checkpoint=...)``
            loads weights. Default: None.
    """
    arch_zoo = {
        ('t', 'tiny'): dict(depths=[2, 2, 2, 2], **PVT_WIDTHS),
        ('s', 'small'): dict(depths=[3, 4, 6, 3], **PVT_WIDTHS),
        ('m', 'medium'): dict(depths=[3, 4, 18, 3], **PVT_WIDTHS),
        ('l', 'large'): dict(depths=[3, 8, 27, 3], **PVT_WIDTHS),
    }
    arch_keys = ('embed_dims', 'depths', 'num_heads', 'mlp_ratios')

    # Layout of PVT (v1); AttnPVTv2 overrides it.
    patch_sizes = (4, 2, 2, 2)
    patch_paddings: Tuple[Union[str, int], ...] = ('corner', ) * 4
    use_abs_pos_embed = True
    use_conv_ffn = False
    norm_after_stage = False

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 attn_cfgs: Union[dict, Sequence[dict]] = dict(
                     type='FocusedLinearAttention'),
                 pretrain_img_size: Union[int, Tuple[int, int]] = 224,
                 in_channels: int = 3,
                 sr_ratios: Sequence[int] = (1, 1, 1, 1),
                 qkv_bias: bool = True,
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
        if len(sr_ratios) != num_stages:
            raise ValueError('sr_ratios needs one entry per stage')
        attn_cfgs = [
            per_block_attention(cfg, depth, i) for i, (cfg, depth) in
            enumerate(zip(per_stage_attention(attn_cfgs, num_stages), depths))
        ]
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
            grid = grid_after_stride(grid, strides[i])
            if self.use_abs_pos_embed:
                stage['pos_embed'] = ResizablePosEmbed(embed_dims[i], grid)
            stage['blocks'] = ModuleList([
                TransformerBlock(
                    embed_dims[i],
                    build_attention(
                        attn_cfgs[i][j],
                        embed_dims=embed_dims[i],
                        num_heads=arch['num_heads'][i],
                        qkv_bias=qkv_bias,
                        context=dict(grid_size=grid),
                        # Only attentions with a spatial reduction take it.
                        **(dict(sr_ratio=sr_ratios[i])
                           if sr_ratios[i] > 1 else {})),
                    ffn_ratio=arch['mlp_ratios'][i],
                    use_conv_ffn=self.use_conv_ffn,
                    drop_path=drop_paths[sum(depths[:i]) + j],
                    norm_cfg=norm_cfg,
                    with_cp=with_cp) for j in range(depth)
            ])
            if self.norm_after_stage or (out_norm and i in self.out_indices):
                stage['norm'] = build_norm_layer(norm_cfg, embed_dims[i])[1]
            self.stages.append(stage)
        self._register_load_state_dict_pre_hook(self._migrate_on_load)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        init_linear_and_norm(module)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        return self.forward_stages(x)[0]

    def forward_stages(self, x: torch.Tensor) -> Tuple[tuple, dict]:
        """The outputs, and the state the stages passed along (see
        :meth:`forward_blocks`)."""
        self.check_input_size(x)
        outs, state = [], {}
        for i, stage in enumerate(self.stages):
            x, hw_shape = stage['patch_embed'](x)
            if 'pos_embed' in stage:
                x = x + stage['pos_embed'](hw_shape)
            x = self.forward_blocks(i, x, hw_shape, state)
            out = stage['norm'](x) if 'norm' in stage else x
            if self.norm_after_stage:
                x = out
            if i in self.out_indices:
                outs.append(nlc_to_nchw(out, hw_shape))
            x = nlc_to_nchw(x, hw_shape)
        return tuple(outs), state

    def forward_blocks(self, stage: int, x: torch.Tensor,
                       hw_shape: Tuple[int, int], state: dict) -> torch.Tensor:
        """The blocks of ``stage``, each through :meth:`forward_block`."""
        for j, block in enumerate(self.stages[stage]['blocks']):
            x = self.forward_block(block, x, hw_shape, state, stage, j)
        return x

    def _freeze_stages(self) -> None:
        for i in range(min(self.frozen_stages + 1, len(self.stages))):
            freeze_module(self.stages[i])

    @classmethod
    def convert_checkpoint(cls, state_dict: StateDict) -> StateDict:
        """PVT-v1 FFNs written as 1x1 convs by older versions -> Linear."""
        migrated = dict(state_dict)
        migrate_conv1x1_ffn(migrated)
        return state_dict if migrated.keys() == state_dict.keys() \
            else migrated

    def _migrate_on_load(self, state_dict, prefix, *args, **kwargs):
        migrate_conv1x1_ffn(state_dict, prefix)


@register_model
class AttnPVTv2(AttnPVT):
    """PVTv2 whose attention is chosen per stage.

    PVTv2's layout: overlapping patch embeddings (7x7 stride 4, then 3x3
    stride 2), a 3x3 depthwise conv inside every FFN, no absolute position
    embedding, and a norm closing every stage on the main path (which is
    also the output norm). Arguments as :class:`AttnPVT`; arch 'b0' ...
    'b4'.
    """
    arch_zoo = {
        'b0': dict(embed_dims=[32, 64, 160, 256], depths=[2, 2, 2, 2],
                   **PVT_HEADS),
        'b1': dict(depths=[2, 2, 2, 2], **PVT_WIDTHS),
        'b2': dict(depths=[3, 4, 6, 3], **PVT_WIDTHS),
        'b3': dict(depths=[3, 4, 18, 3], **PVT_WIDTHS),
        'b4': dict(depths=[3, 8, 27, 3], **PVT_WIDTHS),
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
