"""The ``attn_cfgs`` grammar: how a skeleton is told which attention each
block runs, one rule for every skeleton.

``attn_cfgs`` is a dict (or None) that serves every stage, or a list with
one entry per stage: a dict for all its blocks, a list with one per block,
or None for the skeleton's own attention. A family passes its attention
plan as a callable ``plan(arch, grids)`` returning any of these, given the
resolved arch and the stages' pretraining grids.
"""
from typing import Callable, List, Sequence, Union

from .base import Grid

AttnCfgs = Union[None, dict, Sequence[Union[None, dict, Sequence[dict]]],
                 Callable[[dict, List[Grid]], object]]


def resolve_attn_cfgs(attn_cfgs: AttnCfgs, arch: dict,
                      depths: Sequence[int], grids: Sequence[Grid],
                      default: Union[dict, Callable[[int, int], dict]]
                      ) -> List[List[dict]]:
    """``attn_cfgs`` as one config per block of every stage.

    Args:
        attn_cfgs (dict | list | callable | None): See the module
            docstring.
        arch (dict): The resolved arch (what a plan reads).
        depths (Sequence[int]): Blocks per stage.
        grids (Sequence[tuple[int, int]]): Each stage's pretraining grid.
        default (dict | callable): The skeleton's own attention, as a
            config or ``default(stage, block)``.

    Returns:
        list[list[dict]]: A fresh config per block.
    """
    if callable(attn_cfgs):
        attn_cfgs = attn_cfgs(arch, list(grids))
    num_stages = len(depths)
    if attn_cfgs is None or isinstance(attn_cfgs, dict):
        attn_cfgs = [attn_cfgs] * num_stages
    if not isinstance(attn_cfgs, (list, tuple)):
        raise TypeError('attn_cfgs must be a dict, a list (one entry per '
                        f'stage) or None, got {type(attn_cfgs).__name__}')
    if len(attn_cfgs) != num_stages:
        raise ValueError(f'attn_cfgs has {len(attn_cfgs)} entries for '
                         f'{num_stages} stages')
    resolved = []
    for i, (cfg, depth) in enumerate(zip(attn_cfgs, depths)):
        if cfg is None or isinstance(cfg, dict):
            cfg = [cfg] * depth
        elif len(cfg) != depth:
            raise ValueError(f'attn_cfgs of stage {i} lists {len(cfg)} '
                             f'blocks; the stage has {depth}')
        blocks = []
        for j, block in enumerate(cfg):
            if block is None:
                block = default(i, j) if callable(default) else default
            elif not isinstance(block, dict):
                raise TypeError(f'attn_cfgs of stage {i}, block {j}: '
                                f'expected a dict or None, got {block!r}')
            blocks.append(dict(block))
        resolved.append(blocks)
    return resolved
