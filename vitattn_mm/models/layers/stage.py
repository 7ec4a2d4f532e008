"""What a staged backbone is made of: its stages, the stochastic-depth
schedule over their blocks, the initialisation Swin, PVT and their
offspring share, and the small factories a description names (picklable,
so a built model that keeps its description still pickles)."""
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmengine.model import BaseModule
from mmengine.model.weight_init import trunc_normal_


def linear_drop_path_rates(rate: float, num_blocks: int) -> List[float]:
    """Stochastic depth growing linearly from 0 to ``rate`` over the blocks
    (plain floats, so models also build on the meta device)."""
    return [rate * i / max(num_blocks - 1, 1) for i in range(num_blocks)]


def drop_path_slices(rate: float, depths: Sequence[int]) -> List[List[float]]:
    """The linear schedule over every block of the network, cut into one
    slice per stage of ``depths`` blocks: each stage builds its blocks from
    its own slice (as mmpretrain's ``SwinBlockSequence`` and timm's stages
    take theirs), in any order."""
    rates = linear_drop_path_rates(rate, sum(depths))
    starts = [sum(depths[:i]) for i in range(len(depths))]
    return [rates[start:start + depth]
            for start, depth in zip(starts, depths)]


def norm_layer(norm_cfg: dict, channels: int) -> nn.Module:
    """The norm layer of ``norm_cfg`` over ``channels`` (mmcv's
    ``build_norm_layer`` without the name)."""
    return build_norm_layer(norm_cfg, channels)[1]


def learned_table(shape: Tuple[int, ...], std: float = 0.) -> nn.Parameter:
    """A learned table (a class token, a position embedding): zeros, or
    truncated normal of ``std`` as the stock classes draw them."""
    table = nn.Parameter(torch.zeros(*shape))
    if std:
        trunc_normal_(table, std=std)
    return table


def init_linear_and_norm(module: nn.Module) -> None:
    """timm's ViT initialisation, shared by Swin, PVT and their offspring:
    truncated-normal (std 0.02) Linear weights, zero biases, unit
    LayerNorms. Use with ``model.apply``."""
    if isinstance(module, nn.Linear):
        trunc_normal_(module.weight, std=.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


class Stage(BaseModule):
    """One stage of a :class:`StagedBackbone` (attributes left None are
    absent, so they take no keys in the state dict).

    Args:
        blocks (nn.ModuleList): The blocks, ``block(x, hw, state) ->
            (x, state)``.
        patch_embed (nn.Module, optional): Opens the stage: an NCHW map ->
            ``(tokens, hw)``. Default: None.
        pos_embed (nn.Module, optional): ``pos_embed(hw)`` is added to the
            tokens. Default: None.
        norm (nn.Module, optional): Closes the stage on the main path.
            Default: None.
        downsample (nn.Module, optional): Ends the stage after its output:
            ``(tokens, hw) -> (tokens, hw)``. Default: None.
    """

    def __init__(self,
                 blocks: nn.ModuleList,
                 patch_embed: Optional[nn.Module] = None,
                 pos_embed: Optional[nn.Module] = None,
                 norm: Optional[nn.Module] = None,
                 downsample: Optional[nn.Module] = None):
        super().__init__()
        self.patch_embed = patch_embed
        self.pos_embed = pos_embed
        self.blocks = blocks
        self.norm = norm
        self.downsample = downsample
