"""A stage as a description, before anything is built.

Every skeleton says what each of its stages holds in one
:class:`StageSpec` (widths, heads, the pretraining grid, one attention
config per block, the stage's slice of the drop-path schedule, what the
attentions are told, the block factory, the factories of what opens and
closes the stage) and :meth:`StagedBackbone.build_stage` builds the stage
from it, the one place stages are built. What follows from the
attentions alone (the least grid they take, the configs they are built
from) is read off the spec, without building a module.
"""
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Tuple

import torch.nn as nn

from ..attentions.base import Grid, accepts, attention_class, pass_on


@dataclass
class StageSpec:
    """One stage's blocks, described.

    Args:
        embed_dims (int): Channels of the stage's tokens.
        num_heads (int): Attention heads.
        grid (tuple[int, int]): The stage's token grid at the pretraining
            size.
        attn_cfgs (list[dict]): One resolved attention config per block
            (:func:`~vitattn_mm.models.attentions.cfgs.resolve_attn_cfgs`).
        drop_path_rates (list[float]): The stage's slice of the network's
            stochastic-depth schedule, one per block
            (:func:`~vitattn_mm.models.layers.stage.drop_path_slices`).
        block (callable): The block factory, ``block(attn,
            drop_path=rate, **block_kwargs[j])`` (e.g. a
            ``functools.partial`` of the skeleton's block class with the
            stage's width and FFN settings).
        block_kwargs (list[dict], optional): Per-block keywords of the
            factory (e.g. L2ViT's alternating local windows). Default: None.
        qkv_bias (bool): Bias of the attentions' projections. Default: True.
        settings (dict): The skeleton's keywords for every attention
            constructor that takes them (dropouts, ``qk_scale``, a
            reduction ratio); one other than 0 / None / False that an
            attention cannot take raises, naming it. Default: {}.
        context (dict): What the skeleton knows that some attentions use
            (``grid_size``, ``split_size``), given to those that take it.
            Default: ``dict(grid_size=grid)``.
        patch_embed (callable, optional): Factory of the patch embedding
            opening the stage (PVT, CSwin, L2ViT after the first).
            Default: None.
        pos_embed (callable, optional): Factory of its learned position
            embedding. Default: None.
        norm (callable, optional): Factory of the norm closing it on the
            main path (PVTv2). Default: None.
        downsample (callable, optional): Factory of the downsampling that
            ends it (Swin's patch merging). Default: None.
    """
    embed_dims: int
    num_heads: int
    grid: Grid
    attn_cfgs: List[dict]
    drop_path_rates: List[float]
    block: Callable[..., nn.Module]
    block_kwargs: Optional[List[dict]] = None
    qkv_bias: bool = True
    settings: dict = field(default_factory=dict)
    context: Optional[dict] = None
    patch_embed: Optional[Callable[[], nn.Module]] = None
    pos_embed: Optional[Callable[[], nn.Module]] = None
    norm: Optional[Callable[[], nn.Module]] = None
    downsample: Optional[Callable[[], nn.Module]] = None

    def __post_init__(self):
        if len(self.drop_path_rates) != len(self.attn_cfgs):
            raise ValueError(f'{len(self.attn_cfgs)} blocks, '
                             f'{len(self.drop_path_rates)} drop-path rates')
        if self.context is None:
            self.context = dict(grid_size=tuple(self.grid))
        if self.block_kwargs is None:
            self.block_kwargs = [{} for _ in self.attn_cfgs]

    @property
    def depth(self) -> int:
        return len(self.attn_cfgs)

    def block_cfgs(self, attn_backend: Optional[str] = None) -> List[dict]:
        """Each block's attention config as it is built: with the
        settings its attention takes and, where it has a fused op,
        ``attn_backend`` (unless the config sets them)."""
        cfgs = []
        for cfg in self.attn_cfgs:
            cfg = dict(cfg)
            attention = attention_class(cfg['type']).configured_class(cfg)
            pass_on(cfg, attention, **self.settings)
            if attn_backend is not None and accepts(attention,
                                                    'attn_backend'):
                cfg.setdefault('attn_backend', attn_backend)
            cfgs.append(cfg)
        return cfgs

    def block_attention(self, block: int) -> Tuple[str, bool]:
        """Block ``block``'s attention, by class name, and whether it runs
        inside the window wrapper (what an official block's tensors
        convert by)."""
        cfg = self.attn_cfgs[block]
        outer = attention_class(cfg['type'])
        inner = outer.configured_class(cfg)
        return inner.__name__, inner is not outer

    def min_grid(self) -> int:
        """The least grid side the stage's attentions take."""
        return max([1] + [attention_class(cfg['type']).min_grid(cfg)
                          for cfg in self.block_cfgs()])

    def attention_defaults(self) -> dict:
        """What every attention of the stage is built with unless its
        config says otherwise."""
        return dict(embed_dims=self.embed_dims, num_heads=self.num_heads,
                    qkv_bias=self.qkv_bias)
