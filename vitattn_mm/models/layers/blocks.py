"""The pre-norm transformer block every skeleton builds around its
attention, and PVTv2's convolutional FFN."""
from typing import Optional, Tuple

import torch
import torch.nn as nn
from mmcv.cnn import build_activation_layer, build_norm_layer
from mmcv.cnn.bricks import DropPath
from mmcv.cnn.bricks.transformer import FFN
from mmengine.model import BaseModule, Sequential

from .common import nchw_to_nlc, nlc_to_nchw
from .drop_path import add_residual

Grid = Tuple[int, int]


class ConvFFN(BaseModule):
    """PVTv2's FFN: 1x1 conv, 3x3 depthwise conv, activation, 1x1 conv, on
    the token map, with the residual and its drop path.

    mmdet's ``MixFFN`` with ``use_conv=True`` (the same parameters,
    ``layers.{0,1,4}``, and results; written here so that building a
    backbone needs none of mmdet's detectors, whose import needs mmcv's
    compiled ops).

    Args:
        embed_dims (int): Channels C.
        feedforward_channels (int): Hidden channels.
        act_cfg (dict): Activation. Default: ``dict(type='GELU')``.
        ffn_drop (float): Dropout after the activation and the last conv.
            Default: 0.
        drop_path (float): Stochastic depth of the residual. Default: 0.
        init_cfg (dict, optional): Initialisation config. Default: None.
    """

    def __init__(self,
                 embed_dims: int,
                 feedforward_channels: int,
                 act_cfg: dict = dict(type='GELU'),
                 ffn_drop: float = 0.,
                 drop_path: float = 0.,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        drop = nn.Dropout(ffn_drop)
        self.layers = Sequential(
            nn.Conv2d(embed_dims, feedforward_channels, 1),
            nn.Conv2d(feedforward_channels, feedforward_channels, 3,
                      padding=1, groups=feedforward_channels),
            build_activation_layer(act_cfg), drop,
            nn.Conv2d(feedforward_channels, embed_dims, 1), drop)
        self.dropout_layer = DropPath(drop_path) if drop_path else \
            nn.Identity()

    def forward(self, x: torch.Tensor, hw_shape: Grid,
                identity: Optional[torch.Tensor] = None) -> torch.Tensor:
        out = nchw_to_nlc(self.layers(nlc_to_nchw(x, hw_shape)))
        return add_residual(x if identity is None else identity, out,
                            self.dropout_layer)


class TransformerBlock(BaseModule):
    """Pre-norm block: ``x + drop_path(attn(norm1(x)))``, then
    ``x + drop_path(ffn(norm2(x)))``.

    ``attn`` is any registered attention (see
    :mod:`~vitattn_mm.models.attentions`), called as every attention is:
    ``out, state = attn(x, hw_shape, state)``. The parameter names are
    those of mmdet's and mmpretrain's Swin blocks (``norm1``, ``attn``,
    ``norm2``, ``ffn.layers.0.0``, ``ffn.layers.1``).

    Args:
        embed_dims (int): Channels C.
        attn (nn.Module): The attention.
        ffn_ratio (float): FFN hidden channels / C. Default: 4.
        use_conv_ffn (bool): PVTv2's FFN with a 3x3 depthwise conv between
            its 1x1 convs (:class:`ConvFFN`); otherwise mmcv's Linear
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
        if use_conv_ffn:
            self.ffn = ConvFFN(embed_dims, hidden, act_cfg=act_cfg,
                               ffn_drop=ffn_drop, drop_path=drop_path)
        else:
            # The block adds the residual (add_residual): the FFN returns
            # its branch.
            self.ffn = FFN(embed_dims, hidden, act_cfg=act_cfg,
                           ffn_drop=ffn_drop, add_identity=False)

    def feed_forward(self, x: torch.Tensor, hw_shape: Grid) -> torch.Tensor:
        """``x + drop_path(ffn(norm2(x)))``."""
        if self.use_conv_ffn:
            return self.ffn(self.norm2(x), hw_shape, identity=x)
        return add_residual(x, self.ffn(self.norm2(x)), self.drop_path)

    def forward(self, x: torch.Tensor, hw_shape: Grid, state=None):
        """``(B, N, C)`` tokens on an ``(H, W)`` grid -> the same shape, and
        the state the attention hands on."""
        out, state = self.attn(self.norm1(x), hw_shape, state)
        x = add_residual(x, out, self.drop_path)
        return self.feed_forward(x, hw_shape), state
