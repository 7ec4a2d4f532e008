"""One plain-ViT skeleton for every token attention.

A patch embedding (DeiT's strided conv or Simple ViT's pixel-normalised
linear projection), a position embedding (learned, resized to the running
grid, or Simple ViT's fixed sin-cos), ``depth`` shared pre-norm
:class:`TransformerBlock` s around the registered token attention of
``attn_cfgs`` and a LayerNorm on each output block: SETR's multi-level
features for dense prediction, or the mean token for classification.
No class token: every token is a patch, so any input size works.
"""
import math
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks.transformer import PatchEmbed
from mmdet.models.layers import nlc_to_nchw
from mmengine.model import ModuleList

from ...registry import register_model
from ..layers import (PixelNormPatchEmbed, ResizablePosEmbed,
                      TransformerBlock, VitAttnBackbone, build_attention,
                      freeze_module, init_linear_and_norm,
                      linear_drop_path_rates, per_stage_attention,
                      sincos_pos_embed_2d, to_2tuple_int)

#: Softmax attention (``MeanShiftAttention`` without the mean shift is plain
#: multi-head self-attention with a fused kernel).
SOFTMAX_ATTENTION = dict(type='MeanShiftAttention', mean_shift=False)


@register_model
class AttnViT(VitAttnBackbone):
    """Vision Transformer whose attention comes from the config.

    Args:
        arch (str | dict): 'ti', 'ss', 's', 'b' (or 'tiny', 'small',
            'base'), or a dict with ``embed_dims``, ``depth`` and
            ``num_heads``. Default: 'small'.
        attn_cfgs (dict | Sequence[dict]): The registered token attention of
            every block (a dict) or of each block (a list); the skeleton
            adds ``embed_dims``, ``num_heads``, ``grid_size`` (the
            pretraining grid) and ``qkv_bias``.
            Default: softmax attention.
        in_channels (int): Input channels. Default: 3.
        patch_size (int): Patch side. Default: 16.
        patch_embed (str): 'conv' (ViT / DeiT: a stride-``patch_size``
            conv) or 'pixel_norm' (Simple ViT: LayerNorm over each patch's
            pixels, a linear projection, LayerNorm). Default: 'conv'.
        pos_embed (str): 'learned' (a table on the ``pretrain_img_size``
            grid, resized bilinearly to the running grid) or 'sincos'
            (Simple ViT's fixed 2-D sine-cosine, computed for the running
            grid). Default: 'learned'.
        pretrain_img_size (int | tuple[int, int]): Sizes the learned
            position embedding. Default: 224.
        ffn_ratio (float): FFN hidden channels / C. Default: 4.
        qkv_bias (bool): Bias in the attention projections. Default: True.
        out_indices (Sequence[int] | int): Blocks whose output to return.
            Default: -1 (the last).
        out_type (str): 'featmap' (``(B, C, h, w)`` maps) or 'avg_featmap'
            (the mean token, ``(B, C)``), each through its own LayerNorm.
            Default: 'featmap'.
        drop_path_rate (float): Stochastic depth rate. Default: 0.
        norm_cfg (dict): Norm layers. Default: ``dict(type='LN')``.
        with_cp (bool): Gradient checkpointing per block. Default: False.
        frozen_stages (int): Freeze the patch and position embeddings and
            blocks ``0..frozen_stages`` with their output norms (-1: none).
            Default: -1.
        norm_eval (bool): Keep BatchNorm in eval mode. Default: False.
        init_cfg (dict, optional): ``dict(type='Pretrained', checkpoint=...)``
            loads weights. Default: None.
    """
    arch_zoo = {
        ('ti', 'tiny'): dict(embed_dims=192, depth=12, num_heads=3),
        'ss': dict(embed_dims=384, depth=6, num_heads=6),
        ('s', 'small'): dict(embed_dims=384, depth=12, num_heads=6),
        ('b', 'base'): dict(embed_dims=768, depth=12, num_heads=12),
    }
    arch_keys = ('embed_dims', 'depth', 'num_heads')

    def __init__(self,
                 arch: Union[str, dict] = 'small',
                 attn_cfgs: Union[dict, Sequence[dict]] = SOFTMAX_ATTENTION,
                 in_channels: int = 3,
                 patch_size: int = 16,
                 patch_embed: str = 'conv',
                 pos_embed: str = 'learned',
                 pretrain_img_size: Union[int, Tuple[int, int]] = 224,
                 ffn_ratio: float = 4.,
                 qkv_bias: bool = True,
                 out_indices: Union[int, Sequence[int]] = -1,
                 out_type: str = 'featmap',
                 drop_path_rate: float = 0.,
                 norm_cfg: dict = dict(type='LN'),
                 with_cp: bool = False,
                 frozen_stages: int = -1,
                 norm_eval: bool = False,
                 init_cfg: Optional[dict] = None):
        super().__init__(frozen_stages, norm_eval, init_cfg)
        arch = self.parse_arch(arch)
        embed_dims, depth = arch['embed_dims'], arch['depth']
        for name, value, valid in (
            ('patch_embed', patch_embed, ('conv', 'pixel_norm')),
            ('pos_embed', pos_embed, ('learned', 'sincos')),
            ('out_type', out_type, ('featmap', 'avg_featmap')),
        ):
            if value not in valid:
                raise ValueError(f'{name} must be one of {valid}, got '
                                 f'{value!r}')
        attn_cfgs = per_stage_attention(attn_cfgs, depth, unit='blocks')
        self.embed_dims = embed_dims
        self.out_type = out_type
        self.with_cp = with_cp
        self.out_indices = self.normalize_out_indices(out_indices, depth)
        self.min_input_size = patch_size

        if patch_embed == 'conv':
            self.patch_embed = PatchEmbed(
                in_channels=in_channels,
                embed_dims=embed_dims,
                conv_type='Conv2d',
                kernel_size=patch_size,
                stride=patch_size)
        else:
            self.patch_embed = PixelNormPatchEmbed(in_channels, embed_dims,
                                                   patch_size, norm_cfg)
        grid = tuple(
            math.ceil(s / patch_size)
            for s in to_2tuple_int(pretrain_img_size))
        self.pos_embed = (
            ResizablePosEmbed(embed_dims, grid)
            if pos_embed == 'learned' else None)
        drop_paths = linear_drop_path_rates(drop_path_rate, depth)
        self.blocks = ModuleList([
            TransformerBlock(
                embed_dims,
                build_attention(
                    attn_cfgs[i],
                    embed_dims=embed_dims,
                    num_heads=arch['num_heads'],
                    qkv_bias=qkv_bias,
                    context=dict(grid_size=grid)),
                ffn_ratio=ffn_ratio,
                drop_path=drop_paths[i],
                norm_cfg=norm_cfg,
                with_cp=with_cp) for i in range(depth)
        ])
        for i in self.out_indices:
            self.add_module(f'norm{i}',
                            build_norm_layer(norm_cfg, embed_dims)[1])
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        init_linear_and_norm(module)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        return self.forward_stages(x)[0]

    def forward_stages(self, x: torch.Tensor) -> Tuple[tuple, dict]:
        """The outputs, and the state the blocks passed along (see
        :meth:`forward_block`; a plain ViT is one stage)."""
        self.check_input_size(x)
        x, hw_shape = self.patch_embed(x)
        if self.pos_embed is None:
            pos = sincos_pos_embed_2d(hw_shape, self.embed_dims,
                                      device=x.device)
        else:
            pos = self.pos_embed(hw_shape)
        x = x + pos.to(x.dtype)
        outs, state = [], {}
        for i, block in enumerate(self.blocks):
            x = self.forward_block(block, x, hw_shape, state, 0, i)
            if i in self.out_indices:
                norm = getattr(self, f'norm{i}')
                if self.out_type == 'avg_featmap':
                    outs.append(norm(x.mean(dim=1)))
                else:
                    outs.append(nlc_to_nchw(norm(x), hw_shape))
        return tuple(outs), state

    def _freeze_stages(self) -> None:
        if self.frozen_stages < 0:
            return
        freeze_module(self.patch_embed)
        if self.pos_embed is not None:
            freeze_module(self.pos_embed)
        for i in range(min(self.frozen_stages + 1, len(self.blocks))):
            freeze_module(self.blocks[i])
            if i in self.out_indices:
                freeze_module(getattr(self, f'norm{i}'))
