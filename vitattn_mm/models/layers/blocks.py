"""The pre-norm transformer block every skeleton builds around its attention.
"""
import inspect
import re
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.utils.checkpoint as cp
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks import DropPath
from mmcv.cnn.bricks.transformer import FFN
from mmdet.models.backbones.pvt import MixFFN
from mmengine.model import BaseModule

from ...registry import ATTENTIONS


def attention_class(name: Union[str, type]) -> type:
    """The registered attention ``name`` (a class passes through); a clear
    error listing the registered ones otherwise."""
    cls = ATTENTIONS.get(name) if isinstance(name, str) else name
    if cls is None:
        raise KeyError(f'attention {name!r} is not registered; registered: '
                       f'{sorted(ATTENTIONS.module_dict)}')
    return cls


def per_stage_attention(cfgs: Union[None, dict, Sequence],
                        num: int,
                        default: Optional[dict] = None,
                        unit: str = 'stages') -> list:
    """A skeleton's ``attn_cfgs`` as one entry per stage (or block).

    A dict (or None) serves every one; a list gives each its own. None
    entries become ``default`` (the skeleton's own attention); a dict must
    name its ``type``; a nested list (per-block configs) passes through.
    """
    if cfgs is None or isinstance(cfgs, dict):
        cfgs = [cfgs] * num
    if len(cfgs) != num:
        raise ValueError(f'attn_cfgs has {len(cfgs)} entries for {num} '
                         f'{unit}')
    resolved = []
    for cfg in cfgs:
        if cfg is None or isinstance(cfg, dict):
            cfg = dict(default if cfg is None else cfg)
            if 'type' not in cfg:
                raise KeyError(f'attention config {cfg} has no "type"; '
                               f'registered: {sorted(ATTENTIONS.module_dict)}')
        resolved.append(cfg)
    return resolved


def per_block_attention(cfg: Union[dict, list], depth: int,
                        stage: int) -> list:
    """One stage's attention config (a dict, or a list per block) as one
    config per block."""
    cfgs = [cfg] * depth if isinstance(cfg, dict) else list(cfg)
    if len(cfgs) != depth:
        raise ValueError(f'attn_cfgs of stage {stage} lists {len(cfgs)} '
                         f'blocks; the stage has {depth}')
    return cfgs


def build_attention(cfg: dict,
                    context: Optional[dict] = None,
                    **defaults) -> nn.Module:
    """Build a registered attention.

    Args:
        cfg (dict): ``type`` and the attention's own arguments.
        context (dict, optional): What a skeleton knows that some attentions
            use (``grid_size``: the pretraining token grid, for learned
            positional encodings); given only to those whose constructor
            takes it. Default: None.
        **defaults: Arguments every attention takes (``embed_dims``,
            ``num_heads``, ``qkv_bias``, ...), where ``cfg`` does not set
            them.
    """
    cfg = dict(cfg)
    # Instantiated directly: the attention registry is ours alone, whatever
    # the default scope (mmdet, mmseg, mmpretrain) of the running config.
    cls = attention_class(cfg.pop('type'))
    params = inspect.signature(cls).parameters
    for key, value in (context or {}).items():
        if key in params:
            cfg.setdefault(key, value)
    for key, value in defaults.items():
        cfg.setdefault(key, value)
    return cls(**cfg)


class TransformerBlock(BaseModule):
    """Pre-norm block: ``x + drop_path(attn(norm1(x), hw_shape))``, then
    ``x + drop_path(ffn(norm2(x)))``.

    The attention is any registered token attention: a module whose
    ``forward(x, hw_shape)`` maps ``(B, H*W, C)`` tokens on an ``(H, W)``
    grid to the same shape.

    Args:
        embed_dims (int): Channels C.
        attn (nn.Module): The token attention.
        ffn_ratio (float): FFN hidden channels / C. Default: 4.
        use_conv_ffn (bool): PVTv2's FFN with a 3x3 depthwise conv between
            its 1x1 convs (mmdet's ``MixFFN``); otherwise mmcv's Linear
            ``FFN``. Default: False.
        drop_path (float): Stochastic depth rate. Default: 0.
        act_cfg (dict): FFN activation. Default: ``dict(type='GELU')``.
        norm_cfg (dict): Both norms. Default: ``dict(type='LN')``.
        with_cp (bool): Gradient checkpointing of the block (the one place
            it happens for every skeleton). Default: False.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """

    def __init__(self,
                 embed_dims: int,
                 attn: nn.Module,
                 ffn_ratio: float = 4.,
                 use_conv_ffn: bool = False,
                 drop_path: float = 0.,
                 act_cfg: dict = dict(type='GELU'),
                 norm_cfg: dict = dict(type='LN'),
                 with_cp: bool = False,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        self.with_cp = with_cp
        self.use_conv_ffn = use_conv_ffn
        self.norm1 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.attn = attn
        self.drop_path = DropPath(drop_path) if drop_path else nn.Identity()
        self.norm2 = build_norm_layer(norm_cfg, embed_dims)[1]
        hidden = int(embed_dims * ffn_ratio)
        dropout_layer = dict(type='DropPath', drop_prob=drop_path)
        if use_conv_ffn:
            self.ffn = MixFFN(embed_dims, hidden, act_cfg=act_cfg,
                              dropout_layer=dropout_layer, use_conv=True)
        else:
            self.ffn = FFN(embed_dims, hidden, act_cfg=act_cfg,
                           dropout_layer=dropout_layer)

    def _forward(self, x: torch.Tensor, hw_shape: Tuple[int, int],
                 *attn_args):
        out = self.attn(self.norm1(x), hw_shape, *attn_args)
        state = None
        if isinstance(out, tuple):
            out, state = out
        x = x + self.drop_path(out)
        if self.use_conv_ffn:
            x = self.ffn(self.norm2(x), hw_shape, identity=x)
        else:
            x = self.ffn(self.norm2(x), identity=x)
        return x if state is None and not attn_args else (x, state)

    def forward(self, x: torch.Tensor, hw_shape: Tuple[int, int],
                *attn_args):
        """``(B, H*W, C)`` tokens on an ``(H, W)`` grid -> same shape.

        Extra arguments go to the attention. An attention that carries
        state between layers (LaViT's logits) takes it as an extra argument
        and returns ``(out, state)``; the block then returns
        ``(x, state)``.
        """
        if self.with_cp and x.requires_grad:
            return cp.checkpoint(self._forward, x, hw_shape, *attn_args,
                                 use_reentrant=False)
        return self._forward(x, hw_shape, *attn_args)


def migrate_conv1x1_ffn(state_dict: dict, prefix: str = '') -> None:
    """Rename, in place, FFN weights written as two 1x1 convs (mmdet's
    ``MixFFN`` without its depthwise conv: ``ffn.layers.{0,3}``, 4-D) to
    mmcv's Linear ``FFN`` (``ffn.layers.0.0`` and ``ffn.layers.1``, 2-D).
    A 1x1 conv over tokens is that Linear layer."""
    for key in list(state_dict):
        if not key.startswith(prefix):
            continue
        m = re.match(r'(.*\.ffn\.layers\.)3\.(weight|bias)$', key)
        if not m:
            continue
        base, fc1 = m.group(1), m.group(1) + '0.'
        for old, new in ((key, f'{base}1.{m.group(2)}'),
                         (fc1 + 'weight', f'{base}0.0.weight'),
                         (fc1 + 'bias', f'{base}0.0.bias')):
            if old in state_dict:
                value = state_dict.pop(old)
                state_dict[new] = value.flatten(1) if value.dim() == 4 \
                    else value
