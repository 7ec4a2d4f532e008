"""One CSwin skeleton for every token attention, and CSwin's cross-shaped
window attention.

Dong et al., "CSWin Transformer: A General Vision Transformer Backbone with
Cross-Shaped Windows", CVPR 2022 (https://arxiv.org/abs/2107.00652). Half
of the heads attend within horizontal stripes, half within vertical
stripes, each with its locally-enhanced positional encoding (LePE, a 3x3
depthwise conv of the values within the stripe); the last stage attends
over the whole map.

The skeleton follows the official layout (a 7x7 stride-4 conv stem, 3x3
stride-2 conv merging between stages, each followed by a LayerNorm, the
shared pre-norm :class:`TransformerBlock`) and takes any registered token
attention per stage, CSwin's by default. Added for dense prediction: any
input size (the official classifier takes one size only), NCHW outputs with
a LayerNorm each, and loading of the official files
(:meth:`AttnCSwinTransformer.convert_checkpoint`).
"""
import re
from collections import OrderedDict
from typing import Callable, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import build_norm_layer
from mmengine.model import ModuleList

from ...registry import ATTENTIONS, register_model
from ..layers import (QueryAttention, Stage, StagedBackbone, StateDict,
                      TokenAttention, TransformerBlock, attention_class,
                      build_attention, check_heads, crop_tokens,
                      grid_after_stride, init_linear_and_norm,
                      linear_drop_path_rates, pad_to_multiple, padded_size,
                      pass_on, resolve_attn_cfgs, split_heads, to_2tuple_int,
                      window_partition, window_reverse)
from ..layers.padding import CornerPatchEmbed


@ATTENTIONS.register_module()
class CrossShapedWindowAttention(TokenAttention):
    """CSwin's cross-shaped window self-attention with LePE.

    The first half of the channels (and heads) attends within vertical
    stripes ``split_size`` tokens wide and as high as the map, the second
    half within horizontal stripes ``split_size`` tokens high; the halves
    are concatenated before ``proj``. ``split_size=None`` is the variant of
    CSwin's last stage: all heads over the whole map. In every stripe,
    ``out = softmax(q k^T / sqrt(d)) v + LePE(v)``, LePE being a 3x3
    depthwise conv of the stripe's values (zero-padded at the stripe's
    border), one per branch (``lepe.{branch}``).

    Any grid: a side that is not a multiple of ``split_size`` ends with a
    narrower stripe. This is computed by padding the map with zero tokens
    to a multiple, removing the padded keys from the softmax and cropping
    the padded queries, so the padding never changes a real token's output
    (and LePE sees the same zeros past the last real token as at any stripe
    border). At multiples of the stripe width this is exactly the official
    computation. (The official segmentation code pads instead with zero
    keys that take part in the softmax.)

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads; even when ``split_size`` is set.
        qkv_bias (bool): Bias in the qkv projection. Default: True.
        split_size (int, optional): Stripe width in tokens; None attends
            over the whole map. Default: 7.
        attn_drop (float): Dropout of the attention weights. Default: 0.
        proj_drop (float): Dropout after ``proj``. Default: 0.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 qkv_bias: bool = True,
                 split_size: Optional[int] = 7,
                 attn_drop: float = 0.,
                 proj_drop: float = 0.,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        head_dims = check_heads(embed_dims, num_heads)
        self.num_branches = 1 if split_size is None else 2
        if num_heads % self.num_branches:
            raise ValueError('cross-shaped windows split the heads between '
                             'horizontal and vertical stripes, so num_heads '
                             f'must be even, got {num_heads}')
        if split_size is not None and split_size < 1:
            raise ValueError(f'split_size must be >= 1, got {split_size}')
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.split_size = split_size
        self.scale = head_dims**-0.5
        self.attn_drop = attn_drop
        self.qkv = nn.Linear(embed_dims, embed_dims * 3, bias=qkv_bias)
        branch_dims = embed_dims // self.num_branches
        self.lepe = ModuleList([
            nn.Conv2d(branch_dims, branch_dims, 3, padding=1,
                      groups=branch_dims) for _ in range(self.num_branches)
        ])
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)

    def stripe(self, branch: int) -> Tuple[Optional[int], Optional[int]]:
        """The ``(height, width)`` of branch ``branch``'s windows, None for
        a whole side: vertical stripes, horizontal stripes, or the map."""
        if self.split_size is None:
            return None, None
        return (None, self.split_size) if branch == 0 else (self.split_size,
                                                            None)

    def forward(self, x: torch.Tensor,
                hw_shape: Tuple[int, int]) -> torch.Tensor:
        """``(B, H*W, C)`` tokens on an ``(H, W)`` grid -> same shape."""
        qkv = (t.chunk(self.num_branches, dim=-1)
               for t in self.qkv(x).chunk(3, dim=-1))
        out = [
            self._attend_stripes(branch, q, k, v, tuple(hw_shape))
            for branch, (q, k, v) in enumerate(zip(*qkv))
        ]
        return self.proj_drop(self.proj(torch.cat(out, dim=-1)))

    def _attend_stripes(self, branch: int, q: torch.Tensor, k: torch.Tensor,
                        v: torch.Tensor,
                        hw_shape: Tuple[int, int]) -> torch.Tensor:
        sides = self.stripe(branch)
        window = tuple(s if w is None else w for s, w in zip(hw_shape, sides))
        padded_hw = None
        windows = []
        for t in (q, k, v):
            t, padded_hw = pad_to_multiple(t, hw_shape, sides)
            windows.append(window_partition(t, window))
        q, k, v = windows
        num_windows, length, channels = v.shape
        lepe = self.lepe[branch](v.transpose(1, 2).reshape(
            num_windows, channels, *window))
        lepe = lepe.flatten(2).transpose(1, 2)

        # Keys that are padding take no part: one mask per window of an
        # image, broadcast over images, heads and queries.
        real = torch.ones(1, hw_shape[0] * hw_shape[1], 1, dtype=torch.bool,
                          device=v.device)
        real = window_partition(
            pad_to_multiple(real, hw_shape, sides)[0], window)
        mask = real[..., 0][:, None, None, :]
        heads = self.num_heads // self.num_branches
        q, k, v = (split_heads(t, heads).unflatten(0, (-1, mask.shape[0]))
                   for t in (q, k, v))
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask,
            dropout_p=self.attn_drop if self.training else 0.,
            scale=self.scale)
        out = out.flatten(0, 1).transpose(1, 2).reshape(
            num_windows, length, channels)
        out = window_reverse(out + lepe, padded_hw, window)
        return crop_tokens(out, hw_shape)

    @torch.no_grad()
    def query_attention(self, x: torch.Tensor, hw_shape: Tuple[int, int],
                        index: int) -> QueryAttention:
        """Softmax weights of query ``index`` over the whole map, zero
        outside its stripe (vertical for the first half of the heads,
        horizontal for the second; LePE is not an attention distribution
        and is left out)."""
        H, W = hw_shape
        q, k, _ = (split_heads(t, self.num_heads)[0]
                   for t in self.qkv(x[:1]).chunk(3, dim=-1))
        logits = (q[:, index:index + 1] @ k.transpose(-2, -1))[:, 0]
        logits = logits * self.scale
        rows = torch.arange(H, device=x.device).repeat_interleave(W)
        cols = torch.arange(W, device=x.device).repeat(H)
        row, col = divmod(index, W)
        heads = self.num_heads // self.num_branches
        for branch in range(self.num_branches):
            wh, ww = (s if w is None else w
                      for s, w in zip(hw_shape, self.stripe(branch)))
            inside = (rows // wh == row // wh) & (cols // ww == col // ww)
            logits[branch * heads:(branch + 1) * heads].masked_fill_(
                ~inside, float('-inf'))
        return QueryAttention(logits.softmax(-1), (H, W), q[:, index], k,
                              self.scale)

    def extra_repr(self) -> str:
        return (f'embed_dims={self.embed_dims}, num_heads={self.num_heads}, '
                f'split_size={self.split_size}')


@register_model
class AttnCSwinTransformer(StagedBackbone):
    """CSwin Transformer whose attention is chosen per stage or block.

    Stage ``i``: a patch embedding (stage 0: 7x7 stride-4 conv, padding 2;
    then 3x3 stride-2 conv, padding 1; each followed by a LayerNorm,
    ``stages.{i}.patch_embed``), then ``depths[i]`` shared pre-norm
    :class:`TransformerBlock` s around the stage's attention, and a
    LayerNorm ``norm{i}`` on each output.

    Images whose sides are not multiples of 4 are zero-padded at the
    bottom/right first, so stage ``i`` has ``ceil(H / 2**(i+2))`` rows as in
    the other backbones (the official stem floors, see docs/flatten.md).

    Args:
        arch (str | dict): 'tiny', 'small', 'base', 'large' (or 't', 's',
            'b', 'l'), or a dict with ``embed_dims`` (int), ``depths`` and
            ``num_heads`` (one per stage). Default: 'tiny'.
        attn_cfgs (dict | list, optional): The attention of every stage (a
            dict), of each stage (a list; None is CSwin's) or of each block
            (a list in the list). The skeleton adds ``embed_dims``,
            ``num_heads``, ``qkv_bias`` and, to attentions that take them,
            ``grid_size`` (the stage's pretraining grid) and ``split_size``
            (the stage's ``split_sizes`` entry; None in the last stage).
            Default: None (CSwin's cross-shaped windows everywhere, the
            last stage over the whole map).
        split_sizes (Sequence[int]): Stripe width per stage (the last
            stage's is unused: it attends over the whole map).
            Default: (1, 2, 7, 7).
        pretrain_img_size (int | tuple[int, int]): Input size of the
            pretrained weights: sizes learned positional encodings.
            Default: 224.
        in_channels (int): Input channels. Default: 3.
        mlp_ratio (float): FFN hidden channels / C. Default: 4.
        qkv_bias (bool): Bias in the attention projections. Default: True.
        drop_rate (float): Dropout in the attention projection and the FFN.
            Default: 0.
        attn_drop_rate (float): Dropout of the attention weights.
            Default: 0.
        drop_path_rate (float): Stochastic depth rate. Default: 0.1.
        out_indices (Sequence[int] | int): Output stages, each through its
            own norm ``norm{i}``. Default: (0, 1, 2, 3).
        act_cfg (dict): FFN activation. Default: ``dict(type='GELU')``.
        norm_cfg (dict): Norm layers. Default: ``dict(type='LN')``.
        **kwargs: :class:`StagedBackbone`'s ``frozen_stages``,
            ``norm_eval``, ``with_cp``, ``pretrained`` and ``init_cfg``.
    """
    arch_zoo = {
        ('t', 'tiny'):
        dict(embed_dims=64, depths=[1, 2, 21, 1], num_heads=[2, 4, 8, 16]),
        ('s', 'small'):
        dict(embed_dims=64, depths=[2, 4, 32, 2], num_heads=[2, 4, 8, 16]),
        ('b', 'base'):
        dict(embed_dims=96, depths=[2, 4, 32, 2], num_heads=[4, 8, 16, 32]),
        ('l', 'large'):
        dict(embed_dims=144, depths=[2, 4, 32, 2],
             num_heads=[6, 12, 24, 24]),
    }
    arch_keys = ('embed_dims', 'depths', 'num_heads')

    #: Stride of the stem: images are padded to a multiple of it.
    stem_stride = 4

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 attn_cfgs: Optional[Union[dict, Sequence]] = None,
                 split_sizes: Sequence[int] = (1, 2, 7, 7),
                 pretrain_img_size: Union[int, Tuple[int, int]] = 224,
                 in_channels: int = 3,
                 mlp_ratio: float = 4.,
                 qkv_bias: bool = True,
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0.1,
                 out_indices: Union[int, Sequence[int]] = (0, 1, 2, 3),
                 act_cfg: dict = dict(type='GELU'),
                 norm_cfg: dict = dict(type='LN'),
                 **kwargs):
        arch = self.parse_arch(arch)
        super().__init__(len(arch['depths']), out_indices, **kwargs)
        embed_dims, depths = arch['embed_dims'], arch['depths']
        num_stages = self.num_stages
        if len(split_sizes) != num_stages:
            raise ValueError(f'split_sizes has {len(split_sizes)} entries '
                             f'for {num_stages} stages')
        cfgs = resolve_attn_cfgs(attn_cfgs, depths,
                                 dict(type='CrossShapedWindowAttention'))
        self.embed_dims = embed_dims
        self.depths = list(depths)
        self.num_features = [embed_dims * 2**i for i in range(num_stages)]
        self.split_sizes = tuple(split_sizes)
        # Every stage's tokens must cover at least one pixel of the input.
        self.min_input_size = self.stem_stride * 2**(num_stages - 1)

        grid = to_2tuple_int(pretrain_img_size)
        rates = linear_drop_path_rates(drop_path_rate, sum(depths))
        for i, depth in enumerate(depths):
            dims = self.num_features[i]
            stride = self.stem_stride if i == 0 else 2
            grid = grid_after_stride(grid, stride)
            patch_embed = CornerPatchEmbed(
                in_channels=in_channels if i == 0 else dims // 2,
                embed_dims=dims,
                conv_type='Conv2d',
                kernel_size=7 if i == 0 else 3,
                stride=stride,
                padding=2 if i == 0 else 1,
                norm_cfg=norm_cfg)
            split = split_sizes[i] if i < num_stages - 1 else None
            blocks = ModuleList()
            for j in range(depth):
                cfg = pass_on(cfgs[i][j], attention_class(cfgs[i][j]['type']),
                              attn_drop=attn_drop_rate, proj_drop=drop_rate)
                blocks.append(TransformerBlock(
                    dims,
                    build_attention(
                        cfg,
                        embed_dims=dims,
                        num_heads=arch['num_heads'][i],
                        qkv_bias=qkv_bias,
                        context=dict(grid_size=grid, split_size=split)),
                    ffn_ratio=mlp_ratio,
                    drop_path=rates[sum(depths[:i]) + j],
                    ffn_drop=drop_rate,
                    act_cfg=act_cfg,
                    norm_cfg=norm_cfg))
            self.stages.append(Stage(blocks, patch_embed=patch_embed))
        self.add_output_norms(self.num_features,
                              lambda c: build_norm_layer(norm_cfg, c)[1])
        self.apply(init_linear_and_norm)

    def forward_stem(self, x: torch.Tensor):
        # Without it the 7x7 stride-4 stem (padding 2) drops the last row
        # or column of patches of a side that is 1 or 2 modulo 4.
        s = self.stem_stride
        H, W = x.shape[-2:]
        return F.pad(x, (0, padded_size(W, s) - W, 0,
                         padded_size(H, s) - H)), None

    @classmethod
    def convert_checkpoint(cls, state_dict: StateDict) -> StateDict:
        """See :func:`convert_official_cswin`."""
        return convert_official_cswin(state_dict)


#: Official CSwin-block names -> ours (cross-shaped attention blocks).
_CSWIN_BLOCK_NAMES = (
    (r'qkv\.', 'attn.qkv.'),
    (r'proj\.', 'attn.proj.'),
    (r'attns\.(\d+)\.get_v\.', r'attn.lepe.\1.'),
    (r'mlp\.fc1\.', 'ffn.layers.0.0.'),
    (r'mlp\.fc2\.', 'ffn.layers.1.'),
)

BlockConverter = Callable[[str, str, torch.Tensor], StateDict]


def convert_official_cswin(
        state_dict: StateDict,
        convert_other_block: Optional[BlockConverter] = None,
        is_other_block: Callable[[str], bool] = lambda names: False
) -> StateDict:
    """Official CSwin keys (microsoft/CSWin-Transformer and
    FLatten-CSwin) -> ours; other layouts pass through unchanged.

    ``stage1_conv_embed.{0,2}`` -> ``stages.0.patch_embed.{projection,
    norm}``, ``merge{i}.{conv,norm}`` -> ``stages.{i}.patch_embed.
    {projection,norm}``, ``stage{s}.{j}`` -> ``stages.{s-1}.blocks.{j}``
    (``qkv`` / ``proj`` into ``attn``, ``attns.{b}.get_v`` ->
    ``attn.lepe.{b}``, the MLP as mmcv's ``FFN``), ``norm`` ->
    ``norm{last}``. ``head.*`` is left for the classifier.

    Args:
        state_dict (dict): The file's tensors.
        convert_other_block (callable, optional): ``(prefix, name, value)``
            -> our tensors, for blocks that are not CSwin's (FLatten's).
        is_other_block (callable): Whether a block, given the official
            names of its tensors joined by spaces, goes to
            ``convert_other_block``. Default: none does.
    """
    if not any(k.startswith('stage1_conv_embed.') for k in state_dict):
        return state_dict
    num_stages = max(  # numbered from 1
        int(m.group(1))
        for m in (re.match(r'stage(\d+)\.', k) for k in state_dict) if m)
    block_names = {}
    for key in state_dict:
        m = re.match(r'(stage\d+\.\d+)\.(.+)', key)
        if m:
            block_names.setdefault(m.group(1), []).append(m.group(2))
    other = {block for block, names in block_names.items()
             if convert_other_block and is_other_block(' '.join(names))}

    converted = OrderedDict()
    for key, value in state_dict.items():
        m = re.match(r'((stage(\d+))\.(\d+))\.(.+)', key)
        if m:
            prefix = f'stages.{int(m.group(3)) - 1}.blocks.{m.group(4)}.'
            name = m.group(5)
            if m.group(1) in other:
                converted.update(convert_other_block(prefix, name, value))
                continue
            for pattern, repl in _CSWIN_BLOCK_NAMES:
                name, found = re.subn('^' + pattern, repl, name)
                if found:
                    break
            converted[prefix + name] = value
            continue
        m = re.match(r'stage1_conv_embed\.(0|2)\.(.+)', key)
        if m:
            part = 'projection' if m.group(1) == '0' else 'norm'
            converted[f'stages.0.patch_embed.{part}.{m.group(2)}'] = value
            continue
        m = re.match(r'merge(\d+)\.(conv|norm)\.(.+)', key)
        if m:
            part = 'projection' if m.group(2) == 'conv' else 'norm'
            converted[f'stages.{m.group(1)}.patch_embed.{part}.'
                      f'{m.group(3)}'] = value
            continue
        if key.startswith('norm.'):
            key = f'norm{num_stages - 1}.' + key[len('norm.'):]
        converted[key] = value
    return converted
