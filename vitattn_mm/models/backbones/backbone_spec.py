"""A whole backbone as a description, before anything is built.

:meth:`StagedBackbone.spec` returns one: the stem, every stage
(:class:`~.stage_spec.StageSpec`), the output norms and what comes after
the stages, each as a factory, with the rule that gives each stage's grid
for an input side. :meth:`StagedBackbone.build` makes the network from it,
the one builder of every skeleton; what follows from the layout and the
attentions (the least input, each block's attention, the drop-path
schedule) is read off it without building a module.
"""
from dataclasses import dataclass, field
from itertools import groupby
from typing import Callable, Dict, List, Optional, Tuple

import torch.nn as nn

from .input_size import GridSides, least_input_size
from .stage_spec import StageSpec

#: A named part built once: a module or parameter factory, or None (the
#: attribute is set to None).
Factories = Dict[str, Optional[Callable[[], object]]]


@dataclass
class BackboneSpec:
    """A backbone, described: what :meth:`StagedBackbone.build` makes, in
    the order it makes it.

    Args:
        arch (dict): The resolved arch settings.
        stem (dict): Named factories built first, in order:
            ``patch_embed`` (every skeleton's stem), then what the skeleton
            adds before the first stage (a class token, an absolute
            position table, ``drop_after_pos``).
        stages (list[StageSpec]): Each stage, described.
        out_indices (tuple[int]): The stages whose outputs are returned.
        grid_sides (callable): ``grid_sides(size)``: each stage's grid
            side for an input side of ``size`` pixels
            (:mod:`~vitattn_mm.models.backbones.input_size`).
        output_norm (callable, optional): ``output_norm(width)``, the norm
            ``norm{i}`` of each output; None: outputs are not normalised.
            Default: None.
        head (dict): Named factories built after the stages (a ViT's final
            norm). Default: {}.
    """
    arch: dict
    stem: Factories
    stages: List[StageSpec]
    out_indices: Tuple[int, ...]
    grid_sides: GridSides
    output_norm: Optional[Callable[[int], nn.Module]] = None
    head: Factories = field(default_factory=dict)

    @property
    def depths(self) -> List[int]:
        return [stage.depth for stage in self.stages]

    @property
    def widths(self) -> List[int]:
        return [stage.embed_dims for stage in self.stages]

    def min_grids(self) -> List[int]:
        """The least grid side each stage's attentions take."""
        return [stage.min_grid() for stage in self.stages]

    @property
    def min_input_size(self) -> int:
        """Smallest input side (pixels) the network takes."""
        return least_input_size(self.grid_sides, self.min_grids())

    def block_attention(self, stage: int, block: int) -> Tuple[str, bool]:
        """A block's attention, by class name, and whether it runs inside
        the window wrapper (what an official block's tensors convert
        by)."""
        return self.stages[stage].block_attention(block)

    def table(self) -> List[str]:
        """Markdown lines: one row per stage (width, heads, pretraining
        grid, blocks, the attentions in runs, the drop-path slice, the
        least grid), then the least input."""
        lines = ['| stage | width | heads | pretraining grid | blocks | '
                 'attentions | drop path | least grid |', '|' + ' --- |' * 8]
        for i, stage in enumerate(self.stages):
            rates = stage.drop_path_rates
            lines.append(
                f'| {i} | {stage.embed_dims} | {stage.num_heads} | '
                f'{stage.grid[0]}x{stage.grid[1]} | {stage.depth} | '
                f'{attention_runs(stage)} | {rates[0]:.3f}-{rates[-1]:.3f} '
                f'| {stage.min_grid()} |')
        lines += ['', f'outputs: stages {list(self.out_indices)}; inputs of '
                  f'at least {self.min_input_size}x{self.min_input_size} '
                  'pixels']
        return lines


def attention_runs(stage: StageSpec) -> str:
    """A stage's attentions in order, runs of the same one counted:
    ``2 x WindowMSA (windows)``."""
    names = [f'{name} (windows)' if windowed else name
             for name, windowed in (stage.block_attention(j)
                                    for j in range(stage.depth))]
    return ', '.join(f'{len(list(run))} x {name}'
                     for name, run in groupby(names))
