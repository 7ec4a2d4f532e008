"""The pre-norm transformer block every skeleton builds around its
attention."""
import re
from typing import Optional, Tuple

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks import DropPath
from mmcv.cnn.bricks.transformer import FFN
from mmdet.models.backbones.pvt import MixFFN
from mmengine.model import BaseModule

from .attention import AttentionState, Grid


class TransformerBlock(BaseModule):
    """Pre-norm block: ``x + drop_path(attn(norm1(x)))``, then
    ``x + drop_path(ffn(norm2(x)))``.

    ``attn`` is any registered attention (see
    :mod:`~vitattn_mm.models.layers.attention`); a stateful one gets the
    block's ``state`` and hands back the next. The parameter names are
    those of mmdet's and mmpretrain's Swin blocks (``norm1``, ``attn``,
    ``norm2``, ``ffn.layers.0.0``, ``ffn.layers.1``).

    Args:
        embed_dims (int): Channels C.
        attn (nn.Module): The attention.
        ffn_ratio (float): FFN hidden channels / C. Default: 4.
        use_conv_ffn (bool): PVTv2's FFN with a 3x3 depthwise conv between
            its 1x1 convs (mmdet's ``MixFFN``); otherwise mmcv's Linear
            ``FFN``. Default: False.
        drop_path (float): Stochastic depth rate. Default: 0.
        ffn_drop (float): Dropout inside the FFN. Default: 0.
        act_cfg (dict): FFN activation. Default: ``dict(type='GELU')``.
        norm_cfg (dict): Both norms. Default: ``dict(type='LN')``.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """

    def __init__(self,
                 embed_dims: int,
                 attn: nn.Module,
                 ffn_ratio: float = 4.,
                 use_conv_ffn: bool = False,
                 drop_path: float = 0.,
                 ffn_drop: float = 0.,
                 act_cfg: dict = dict(type='GELU'),
                 norm_cfg: dict = dict(type='LN'),
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        self.use_conv_ffn = use_conv_ffn
        self.norm1 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.attn = attn
        self.drop_path = DropPath(drop_path) if drop_path else nn.Identity()
        self.norm2 = build_norm_layer(norm_cfg, embed_dims)[1]
        hidden = int(embed_dims * ffn_ratio)
        dropout_layer = dict(type='DropPath', drop_prob=drop_path)
        if use_conv_ffn:
            self.ffn = MixFFN(embed_dims, hidden, act_cfg=act_cfg,
                              ffn_drop=ffn_drop, dropout_layer=dropout_layer,
                              use_conv=True)
        else:
            self.ffn = FFN(embed_dims, hidden, act_cfg=act_cfg,
                           ffn_drop=ffn_drop, dropout_layer=dropout_layer)

    def attend(self, x: torch.Tensor, hw_shape: Grid,
               state: Optional[AttentionState]):
        """``attn(x, hw_shape[, state])`` -> ``(out, state)``."""
        if self.attn.stateful:
            return self.attn(x, hw_shape, state)
        return self.attn(x, hw_shape), state

    def feed_forward(self, x: torch.Tensor, hw_shape: Grid) -> torch.Tensor:
        """``x + drop_path(ffn(norm2(x)))``."""
        if self.use_conv_ffn:
            return self.ffn(self.norm2(x), hw_shape, identity=x)
        return self.ffn(self.norm2(x), identity=x)

    def forward(self, x: torch.Tensor, hw_shape: Grid,
                state: Optional[AttentionState] = None
                ) -> Tuple[torch.Tensor, Optional[AttentionState]]:
        """``(B, N, C)`` tokens on an ``(H, W)`` grid -> the same shape, and
        the state the attention hands on (None for stateless ones)."""
        out, state = self.attend(self.norm1(x), hw_shape, state)
        x = x + self.drop_path(out)
        return self.feed_forward(x, hw_shape), state


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
