"""Mean-Shift Feature transformer: MSF attention in Swin and in simple ViTs.

Kobayashi, "Mean-Shift Feature Transformer", CVPR 2024 (paper and code:
https://github.com/tk1980/MSFtransformer).
The official repository (tk1980/MSFtransformer) holds one SimpleViT-S
classifier. :class:`MSFViT` follows it exactly (its checkpoints load through
:meth:`MSFViT.convert_checkpoint`) and adds what dense prediction needs: any
input size and multi-level NCHW outputs (SETR). :class:`MSFSwinTransformer`
puts the same attention into Swin's shifted windows (paper Table 6), with
Swin's relative position bias and shift mask. ``mean_shift=False`` turns
either backbone into the paper's softmax baseline with the same layout.
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
from mmcv.cnn.bricks.transformer import FFN, PatchEmbed, PatchMerging
from mmdet.models.layers import nlc_to_nchw
from mmengine.model import BaseModule, ModuleList
from mmpretrain.models.backbones.swin_transformer import SwinBlock

from ...registry import register_model
from ..layers import (RelativePositionBias, ResizablePosEmbed, VitAttnBackbone,
                      freeze_module, init_linear_and_norm,
                      linear_drop_path_rates, to_2tuple_int,
                      use_traceable_padding)

StateDict = Dict[str, torch.Tensor]


class GroupedLinear(nn.Linear):
    """A linear projection whose input and output channels form G groups.

    Group g maps input channels ``[g*D/G, (g+1)*D/G)`` to E/G outputs with
    its own ``(E/G, D/G)`` block of ``weight`` (shape ``(E, D/G)``, the
    groups' blocks stacked along the rows as in the official code), so the
    layer holds 1/G of a dense layer's weights (paper Sec. 2.3). The outputs
    are laid out by ``mode``:

    * ``'interleave'`` (the paper's): output channel ``e*G + g`` comes from
      group g, i.e. the grouped projection followed by a channel shuffle.
      Any run of consecutive channels (a head) mixes every group, so each
      head passes gradient to every input channel.
    * ``'block'``: group g fills channels ``[g*E/G, (g+1)*E/G)``, so a head
      sees one group only (the ablation of paper Table 4).

    With ``groups=1`` it is ``nn.Linear``. The bias, if any, is added in the
    output order.

    Args:
        in_features (int): Input channels D.
        out_features (int): Output channels E.
        bias (bool): Learn an additive bias. Default: True.
        groups (int): Number of groups G; divides D and E. Default: 1.
        mode (str): 'interleave' or 'block'. Default: 'interleave'.
    """

    def __init__(self,
                 in_features: int,
                 out_features: int,
                 bias: bool = True,
                 groups: int = 1,
                 mode: str = 'interleave'):
        if in_features % groups or out_features % groups:
            raise ValueError(f'groups={groups} must divide in_features='
                             f'{in_features} and out_features={out_features}')
        if mode not in ('interleave', 'block'):
            raise ValueError(f"mode must be 'interleave' or 'block', got "
                             f'{mode!r}')
        # nn.Linear's in_features is the width of one group's input.
        super().__init__(in_features // groups, out_features, bias)
        self.groups = groups
        self.mode = mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.groups == 1:
            return F.linear(x, self.weight, self.bias)
        outs = [
            F.linear(x_g, w_g) for x_g, w_g in zip(
                x.chunk(self.groups, dim=-1),
                self.weight.chunk(self.groups, dim=0))
        ]
        if self.mode == 'interleave':
            out = torch.stack(outs, dim=-1).flatten(-2)
        else:
            out = torch.cat(outs, dim=-1)
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return (f'in_features={self.in_features * self.groups}, '
                f'out_features={self.out_features}, '
                f'bias={self.bias is not None}, groups={self.groups}, '
                f'mode={self.mode!r}')


class MeanShiftAttention(BaseModule):
    """Mean-shift feature (MSF) attention (paper Eq. 12), or plain softmax
    attention with the same layout.

    Per head, with d channels and scale ``d^-1/2``::

        out_h = softmax((q k^T - ||k||^2 / 2) d^-1/2 + B) v - p

    and ``proj`` (W) maps the concatenated heads back. The logits are the
    Gaussian kernel ``-||q - k||^2 / 2 d^-1/2``: its ``||q||^2`` term is the
    same for every key of a query and cancels in the softmax. ``p`` is the
    probe, the subspace position the attention-weighted mean is shifted
    from. q, k, v and p come from one projection ``qkv`` (``4C`` outputs,
    optionally G-grouped, see :class:`GroupedLinear`). With
    ``mean_shift=False`` the logits are ``q k^T d^-1/2`` and there is no
    probe (``qkv`` has ``3C`` outputs): the paper's "Orig." baselines.

    ``B`` is Swin's learned relative position bias plus the shift mask when
    ``window_size`` is given; the module is then a ``window_msa`` for
    mmpretrain's ``ShiftWindowMSA``. Without it the attention is global.

    ``fused=True`` runs ``F.scaled_dot_product_attention`` with the key-norm
    term folded into the additive bias (a ``(B, H, 1, N)`` broadcast for
    global attention); ``fused=False`` writes the same computation as
    matmul, softmax, matmul. Both give the same result; ONNX export always
    writes the explicit form.

    Args:
        embed_dims (int): Channels C (= heads x head channels).
        num_heads (int): Attention heads.
        window_size (tuple[int, int], optional): Window of Swin's window
            attention (adds the relative position bias). Default: None.
        mean_shift (bool): MSF attention; False for softmax attention.
            Default: True.
        groups (int): Groups of the ``qkv`` projection. Default: 1.
        group_mode (str): 'interleave' (the paper's) or 'block'.
            Default: 'interleave'.
        qkv_bias (bool): Bias in ``qkv``. Default: True.
        proj_bias (bool): Bias in ``proj``. Default: True.
        fused (bool): Use scaled_dot_product_attention. Default: True.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 window_size: Optional[Tuple[int, int]] = None,
                 mean_shift: bool = True,
                 groups: int = 1,
                 group_mode: str = 'interleave',
                 qkv_bias: bool = True,
                 proj_bias: bool = True,
                 fused: bool = True,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        if embed_dims % num_heads:
            raise ValueError(f'embed_dims {embed_dims} is not divisible by '
                             f'num_heads {num_heads}')
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.head_dims = embed_dims // num_heads
        self.scale = self.head_dims**-0.5
        self.mean_shift = mean_shift
        self.fused = fused
        # q, k, v (and the probe p): one projection, chunked in this order.
        self.num_parts = 4 if mean_shift else 3
        self.qkv = GroupedLinear(
            embed_dims,
            self.num_parts * embed_dims,
            bias=qkv_bias,
            groups=groups,
            mode=group_mode)
        self.proj = nn.Linear(embed_dims, embed_dims, bias=proj_bias)
        self.relative_position_bias = None if window_size is None else \
            RelativePositionBias(to_2tuple_int(window_size), num_heads)

    def attention_bias(self, batch: int,
                       mask: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        """Relative position bias plus shift mask, broadcastable to
        ``(batch, H, N, N)``; None for unbiased global attention.

        Args:
            batch (int): Number of sequences (``B * num_windows``).
            mask (Tensor, optional): ``(num_windows, N, N)`` additive mask,
                windows ordered image-major as Swin partitions them.
        """
        bias = None
        if self.relative_position_bias is not None:
            bias = self.relative_position_bias().unsqueeze(0)
        if mask is not None:
            mask = mask.unsqueeze(1)
            bias = mask if bias is None else bias + mask
            bias = bias.repeat(batch // mask.shape[0], 1, 1, 1)
        return bias

    def forward(self,
                x: torch.Tensor,
                mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``(B, N, C)`` tokens (windows or whole maps) -> same shape."""
        B, N, C = x.shape
        parts = self.qkv(x).view(B, N, self.num_parts, self.num_heads,
                                 self.head_dims).permute(2, 0, 3, 1, 4)
        q, k, v = parts[0], parts[1], parts[2]
        bias = self.attention_bias(B, mask)
        if self.mean_shift:
            key_bias = k.pow(2).sum(-1).unsqueeze(-2) * (-0.5 * self.scale)
            bias = key_bias if bias is None else bias + key_bias
        # ONNX export takes the explicit form (the same result): the dynamo
        # exporter cannot decompose SDPA with this mask on symbolic sizes.
        if self.fused and not torch.onnx.is_in_onnx_export():
            out = F.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=None if bias is None else bias.to(q.dtype),
                scale=self.scale)
        else:
            logits = (q * self.scale) @ k.transpose(-2, -1)
            if bias is not None:
                logits = logits + bias
            out = logits.softmax(dim=-1).to(v.dtype) @ v
        if self.mean_shift:
            out = out - parts[3]
        return self.proj(out.transpose(1, 2).reshape(B, N, C))

    def extra_repr(self) -> str:
        return (f'embed_dims={self.embed_dims}, num_heads={self.num_heads}, '
                f'mean_shift={self.mean_shift}, fused={self.fused}')


def sincos_pos_embed_2d(hw: Tuple[int, int],
                        channels: int,
                        temperature: float = 10000.,
                        device=None) -> torch.Tensor:
    """Fixed 2-D sine-cosine position embedding of Simple ViT, ``(H*W, C)``.

    A quarter of the channels each hold ``sin`` and ``cos`` of the column
    and of the row index at frequencies ``temperature^(-i / (C/4 - 1))``, in
    the order (sin x, cos x, sin y, cos y), as the official model computes
    it.
    """
    if channels % 4:
        raise ValueError(f'sin-cos position embedding needs channels '
                         f'divisible by 4, got {channels}')
    rows, cols = torch.meshgrid(
        torch.arange(hw[0], device=device, dtype=torch.float32),
        torch.arange(hw[1], device=device, dtype=torch.float32),
        indexing='ij')
    quarter = channels // 4
    freqs = temperature**-(
        torch.arange(quarter, device=device, dtype=torch.float32) /
        max(quarter - 1, 1))
    x = cols.flatten()[:, None] * freqs
    y = rows.flatten()[:, None] * freqs
    return torch.cat([x.sin(), x.cos(), y.sin(), y.cos()], dim=1)


class PixelNormPatchEmbed(BaseModule):
    """Simple ViT's patch embedding: LayerNorm over each patch's pixels,
    a linear projection, LayerNorm again.

    Pixels are flattened in (row, column, channel) order within a patch, as
    in the official model. Inputs whose sides are not multiples of the patch
    size are zero-padded at the bottom / right (mmcv's 'corner' padding).

    Args:
        in_channels (int): Image channels.
        embed_dims (int): Token channels.
        patch_size (int): Patch side. Default: 16.
        norm_cfg (dict): Both norms. Default: ``dict(type='LN')``.
    """

    def __init__(self,
                 in_channels: int,
                 embed_dims: int,
                 patch_size: int = 16,
                 norm_cfg: dict = dict(type='LN')):
        super().__init__()
        self.patch_size = patch_size
        patch_dims = in_channels * patch_size**2
        self.pixel_norm = build_norm_layer(norm_cfg, patch_dims)[1]
        self.projection = nn.Linear(patch_dims, embed_dims)
        self.norm = build_norm_layer(norm_cfg, embed_dims)[1]

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, tuple]:
        """``(B, C, H, W)`` -> ``(B, h*w, embed_dims)`` and ``(h, w)``."""
        p = self.patch_size
        x = F.pad(x, (0, -x.shape[-1] % p, 0, -x.shape[-2] % p))
        B, C, H, W = x.shape
        h, w = H // p, W // p
        x = x.view(B, C, h, p, w, p).permute(0, 2, 4, 3, 5, 1)
        x = x.reshape(B, h * w, p * p * C)
        return self.norm(self.projection(self.pixel_norm(x))), (h, w)


class MSFViTBlock(BaseModule):
    """Pre-norm transformer block with global MSF (or softmax) attention:
    ``x + attn(norm1(x))``, then ``x + ffn(norm2(x))``.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads.
        ffn_ratio (float): FFN hidden channels / C. Default: 4.
        drop_path (float): Stochastic depth rate. Default: 0.
        norm_cfg (dict): Norm layers. Default: ``dict(type='LN')``.
        **attn_kwargs: :class:`MeanShiftAttention` arguments
            (``mean_shift``, ``groups``, ``qkv_bias``, ...).
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 ffn_ratio: float = 4.,
                 drop_path: float = 0.,
                 norm_cfg: dict = dict(type='LN'),
                 **attn_kwargs):
        super().__init__()
        self.norm1 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.attn = MeanShiftAttention(embed_dims, num_heads, **attn_kwargs)
        self.drop_path = DropPath(drop_path) if drop_path else nn.Identity()
        self.norm2 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.ffn = FFN(
            embed_dims,
            int(embed_dims * ffn_ratio),
            act_cfg=dict(type='GELU'),
            dropout_layer=dict(type='DropPath', drop_prob=drop_path))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop_path(self.attn(self.norm1(x)))
        return self.ffn(self.norm2(x), identity=x)


def _run_block(block: nn.Module, with_cp: bool, x: torch.Tensor, *args):
    """``block(x, *args)``, gradient-checkpointed when asked and useful."""
    if with_cp and x.requires_grad:
        return cp.checkpoint(block, x, *args, use_reentrant=False)
    return block(x, *args)


@register_model
class MSFSwinTransformer(VitAttnBackbone):
    """Swin Transformer with MSF attention in every window (paper Table 6).

    Swin's layout (patch embedding, patch merging, blocks alternating
    regular and shifted 7x7 windows with relative position bias) with
    :class:`MeanShiftAttention` as the window attention of every block
    (mmpretrain's ``SwinBlock`` / ``ShiftWindowMSA`` around it).
    ``mean_shift=False`` gives Swin itself (the paper's "Orig." rows);
    ``groups=2`` the "MSF w/ 2-group" rows.

    Args:
        arch (str | dict): 'tiny' or 'small' (or 't', 's'), or a dict with
            ``embed_dims`` (int), ``depths`` and ``num_heads`` (one per
            stage). Default: 'tiny'.
        in_channels (int): Input channels. Default: 3.
        patch_size (int): Stem patch size. Default: 4.
        window_size (int): Attention window. Default: 7.
        mlp_ratio (float): FFN hidden channels / C. Default: 4.
        mean_shift (bool): MSF attention; False for Swin's softmax
            attention. Default: True.
        groups (int): Groups of the q/k/v/p projection. Default: 1.
        group_mode (str): 'interleave' (the paper's) or 'block'.
            Default: 'interleave'.
        qkv_bias (bool): Bias in the q/k/v/p projection. Default: True.
        fused (bool): Fused attention kernel. Default: True.
        drop_path_rate (float): Stochastic depth rate. Default: 0.1.
        out_indices (Sequence[int] | int): Output stages.
            Default: (0, 1, 2, 3).
        pad_small_map (bool): Pad maps smaller than the window (and keep
            shifting), as dense prediction needs. False follows the
            official classification behaviour (a map equal to the window is
            not shifted). Default: True.
        norm_cfg (dict): Norm layers. Default: ``dict(type='LN')``.
        with_cp (bool): Gradient checkpointing per block. Default: False.
        frozen_stages (int): Stages to freeze (-1: none). Default: -1.
        norm_eval (bool): Keep BatchNorm in eval mode. Default: False.
        init_cfg (dict, optional): ``dict(type='Pretrained', checkpoint=...)``
            loads weights. Default: None.
    """
    arch_zoo = {
        ('t', 'tiny'):
        dict(embed_dims=96, depths=[2, 2, 6, 2], num_heads=[3, 6, 12, 24]),
        ('s', 'small'):
        dict(embed_dims=96, depths=[2, 2, 18, 2], num_heads=[3, 6, 12, 24]),
    }
    arch_keys = ('embed_dims', 'depths', 'num_heads')

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 in_channels: int = 3,
                 patch_size: int = 4,
                 window_size: int = 7,
                 mlp_ratio: float = 4.,
                 mean_shift: bool = True,
                 groups: int = 1,
                 group_mode: str = 'interleave',
                 qkv_bias: bool = True,
                 fused: bool = True,
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
        self.with_cp = with_cp
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
        attn_cfgs = dict(
            window_msa=MeanShiftAttention,
            mean_shift=mean_shift,
            groups=groups,
            group_mode=group_mode,
            qkv_bias=qkv_bias,
            fused=fused)
        drop_paths = linear_drop_path_rates(drop_path_rate, sum(depths))
        self.downsamples = ModuleList()
        self.stages = ModuleList()
        for i, depth in enumerate(depths):
            if i > 0:
                self.downsamples.append(
                    PatchMerging(embed_dims[i - 1], embed_dims[i],
                                 norm_cfg=norm_cfg))
            first = sum(depths[:i])
            self.stages.append(
                ModuleList([
                    SwinBlock(
                        embed_dims[i],
                        num_heads[i],
                        window_size=window_size,
                        shift=j % 2 == 1,
                        ffn_ratio=mlp_ratio,
                        drop_path=drop_paths[first + j],
                        pad_small_map=pad_small_map,
                        attn_cfgs=attn_cfgs,
                        norm_cfg=norm_cfg) for j in range(depth)
                ]))
        for i in self.out_indices:
            self.add_module(f'norm{i}',
                            build_norm_layer(norm_cfg, embed_dims[i])[1])
        self.apply(self._init_weights)
        use_traceable_padding(self)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        """Swin's (timm) initialisation; the relative position bias tables
        initialise themselves."""
        init_linear_and_norm(module)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        self.check_input_size(x)
        x, hw_shape = self.patch_embed(x)
        outs = []
        for i, blocks in enumerate(self.stages):
            if i > 0:
                x, hw_shape = self.downsamples[i - 1](x, hw_shape)
            for block in blocks:
                x = _run_block(block, self.with_cp, x, hw_shape)
            if i in self.out_indices:
                out = getattr(self, f'norm{i}')(x)
                outs.append(nlc_to_nchw(out, hw_shape))
        return tuple(outs)

    def _freeze_stages(self) -> None:
        if self.frozen_stages < 0:
            return
        freeze_module(self.patch_embed)
        for i in range(min(self.frozen_stages + 1, len(self.stages))):
            if i > 0:
                freeze_module(self.downsamples[i - 1])
            freeze_module(self.stages[i])
            if i in self.out_indices:
                freeze_module(getattr(self, f'norm{i}'))


@register_model
class MSFViT(VitAttnBackbone):
    """Simple ViT with MSF attention (paper Table 5; the official model).

    Patch-16 embedding (:class:`PixelNormPatchEmbed`), a position embedding,
    ``depth`` pre-norm blocks of global :class:`MeanShiftAttention` and an
    MLP, no class token. ``mean_shift=False`` gives the softmax Simple ViT
    of the paper's "Orig." rows; ``groups=2`` the "w/ 2-group" rows.

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
        arch (str | dict): 'ti', 'ss', 's', 'b' (or 'tiny', 'small',
            'base'), or a dict with ``embed_dims``, ``depth`` and
            ``num_heads``. Default: 'small'.
        in_channels (int): Input channels. Default: 3.
        patch_size (int): Patch side. Default: 16.
        ffn_ratio (float): FFN hidden channels / C. Default: 4.
        mean_shift (bool): MSF attention; False for softmax attention.
            Default: True.
        groups (int): Groups of the q/k/v/p projection. Default: 1.
        group_mode (str): 'interleave' (the paper's) or 'block'.
            Default: 'interleave'.
        qkv_bias (bool): Bias in the q/k/v/p projection and the output
            projection (the official model has none). Default: False.
        fused (bool): Fused attention kernel. Default: True.
        pos_embed (str): 'sincos' or 'learned'. Default: 'sincos'.
        pretrain_img_size (int | tuple[int, int]): Sizes the learned
            position embedding. Default: 224.
        out_indices (Sequence[int] | int): Blocks whose output to return.
            Default: -1 (the last).
        out_type (str): 'featmap' or 'avg_featmap'. Default: 'featmap'.
        drop_path_rate (float): Stochastic depth rate. Default: 0.
        norm_cfg (dict): Norm layers. Default: ``dict(type='LN')``.
        with_cp (bool): Gradient checkpointing per block. Default: False.
        frozen_stages (int): Freeze the patch embedding and blocks
            ``0..frozen_stages`` (-1: none). Default: -1.
        norm_eval (bool): Keep BatchNorm in eval mode. Default: False.
        init_cfg (dict, optional): ``dict(type='Pretrained', checkpoint=...)``
            loads official or converted weights. Default: None.
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
                 in_channels: int = 3,
                 patch_size: int = 16,
                 ffn_ratio: float = 4.,
                 mean_shift: bool = True,
                 groups: int = 1,
                 group_mode: str = 'interleave',
                 qkv_bias: bool = False,
                 fused: bool = True,
                 pos_embed: str = 'sincos',
                 pretrain_img_size: Union[int, Tuple[int, int]] = 224,
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
        if pos_embed not in ('sincos', 'learned'):
            raise ValueError(f"pos_embed must be 'sincos' or 'learned', got "
                             f'{pos_embed!r}')
        if out_type not in ('featmap', 'avg_featmap'):
            raise ValueError(f"out_type must be 'featmap' or 'avg_featmap', "
                             f'got {out_type!r}')
        self.embed_dims = embed_dims
        self.out_type = out_type
        self.with_cp = with_cp
        self.out_indices = self.normalize_out_indices(out_indices, depth)
        self.min_input_size = patch_size

        self.patch_embed = PixelNormPatchEmbed(in_channels, embed_dims,
                                               patch_size, norm_cfg)
        self.pos_embed = None
        if pos_embed == 'learned':
            grid = tuple(
                math.ceil(s / patch_size)
                for s in to_2tuple_int(pretrain_img_size))
            self.pos_embed = ResizablePosEmbed(embed_dims, grid)
        drop_paths = linear_drop_path_rates(drop_path_rate, depth)
        self.blocks = ModuleList([
            MSFViTBlock(
                embed_dims,
                arch['num_heads'],
                ffn_ratio=ffn_ratio,
                drop_path=drop_paths[i],
                norm_cfg=norm_cfg,
                mean_shift=mean_shift,
                groups=groups,
                group_mode=group_mode,
                qkv_bias=qkv_bias,
                proj_bias=qkv_bias,
                fused=fused) for i in range(depth)
        ])
        for i in self.out_indices:
            self.add_module(f'norm{i}',
                            build_norm_layer(norm_cfg, embed_dims)[1])
        # PyTorch's default initialisation, as the official model trains.

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        self.check_input_size(x)
        x, hw_shape = self.patch_embed(x)
        if self.pos_embed is None:
            pos = sincos_pos_embed_2d(hw_shape, self.embed_dims,
                                      device=x.device)
        else:
            pos = self.pos_embed(hw_shape)
        x = x + pos.to(x.dtype)
        outs = []
        for i, block in enumerate(self.blocks):
            x = _run_block(block, self.with_cp, x)
            if i in self.out_indices:
                norm = getattr(self, f'norm{i}')
                if self.out_type == 'avg_featmap':
                    outs.append(norm(x.mean(dim=1)))
                else:
                    outs.append(nlc_to_nchw(norm(x), hw_shape))
        return tuple(outs)

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

    @classmethod
    def convert_checkpoint(cls, state_dict: StateDict) -> StateDict:
        """Official SimpleViT keys -> ours; other layouts pass through.

        ``to_patch_embedding.{1,2,3}`` -> ``patch_embed.{pixel_norm,
        projection,norm}``; ``transformer.layers.{i}.0`` (attention:
        ``norm``, ``to_qkvp`` / ``to_qkv``, ``to_out``) ->
        ``blocks.{i}.{norm1,attn.qkv,attn.proj}``;
        ``transformer.layers.{i}.1.net.{0,1,3}`` -> ``blocks.{i}.{norm2,
        ffn.layers.0.0,ffn.layers.1}``; the head's norm ``linear_head.0``
        (applied to the mean token) -> the last block's output norm;
        ``linear_head.1`` -> ``head.fc``, left for the classifier.
        """
        layer_ids = [
            int(m.group(1)) for m in (
                re.match(r'transformer\.layers\.(\d+)\.', k)
                for k in state_dict) if m
        ]
        if not layer_ids:
            return state_dict
        renames = [
            (r'to_patch_embedding\.1\.', 'patch_embed.pixel_norm.'),
            (r'to_patch_embedding\.2\.', 'patch_embed.projection.'),
            (r'to_patch_embedding\.3\.', 'patch_embed.norm.'),
            (r'transformer\.layers\.(\d+)\.0\.norm\.', r'blocks.\1.norm1.'),
            (r'transformer\.layers\.(\d+)\.0\.to_qkvp?\.',
             r'blocks.\1.attn.qkv.'),
            (r'transformer\.layers\.(\d+)\.0\.to_out\.',
             r'blocks.\1.attn.proj.'),
            (r'transformer\.layers\.(\d+)\.1\.net\.0\.', r'blocks.\1.norm2.'),
            (r'transformer\.layers\.(\d+)\.1\.net\.1\.',
             r'blocks.\1.ffn.layers.0.0.'),
            (r'transformer\.layers\.(\d+)\.1\.net\.3\.',
             r'blocks.\1.ffn.layers.1.'),
            (r'linear_head\.0\.', f'norm{max(layer_ids)}.'),
            (r'linear_head\.1\.', 'head.fc.'),
        ]
        converted = OrderedDict()
        for key, value in state_dict.items():
            for pattern, replacement in renames:
                new_key, found = re.subn('^' + pattern, replacement, key)
                if found:
                    key = new_key
                    break
            converted[key] = value
        return converted
