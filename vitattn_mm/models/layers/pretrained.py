"""Loading pretrained backbone weights, loudly.

mmengine's ``Pretrained`` initialiser unwraps only ``state_dict`` and loads
with ``strict=False``, so an official ``{'model': ...}`` file silently loads
nothing. :func:`load_pretrained` unwraps the usual containers, strips a
``backbone.`` prefix, applies the family's key converter, resizes learned
positional embeddings, and reports what was loaded, missing, unexpected or
skipped for a shape mismatch. A file that matches no key raises.
"""
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import torch
import torch.nn as nn
from mmengine.logging import MMLogger, print_log
from mmengine.runner.checkpoint import CheckpointLoader

StateDict = Dict[str, torch.Tensor]

#: Containers tried, in order, when a checkpoint file is a dict of dicts.
STATE_DICT_KEYS = ('state_dict', 'model', 'module')


@dataclass
class LoadReport:
    """What :func:`load_pretrained` did."""
    checkpoint: str
    loaded: List[str] = field(default_factory=list)
    missing: List[str] = field(default_factory=list)
    unexpected: List[str] = field(default_factory=list)
    mismatched: List[str] = field(default_factory=list)

    def summary(self, max_keys: int = 20) -> str:

        def fmt(keys):
            more = f' ... (+{len(keys) - max_keys})' if len(
                keys) > max_keys else ''
            return ', '.join(keys[:max_keys]) + more

        lines = [f'Loaded {len(self.loaded)} tensors from {self.checkpoint}.']
        if self.missing:
            lines.append(f'Missing in checkpoint ({len(self.missing)}): '
                         f'{fmt(self.missing)}')
        if self.unexpected:
            lines.append(f'Unexpected in checkpoint ({len(self.unexpected)}):'
                         f' {fmt(self.unexpected)}')
        if self.mismatched:
            lines.append(f'Skipped for shape mismatch '
                         f'({len(self.mismatched)}): {fmt(self.mismatched)}')
        return '\n'.join(lines)


def unwrap_state_dict(checkpoint, key: Optional[str] = None) -> StateDict:
    """Return the tensor dict inside a checkpoint file's content.

    Args:
        checkpoint (dict): What the file held.
        key (str, optional): Container to take, e.g. ``'model_ema'``.
            Default: the first of ``state_dict``, ``model``, ``module``.
    """
    if not isinstance(checkpoint, dict):
        raise TypeError(f'a checkpoint must be a dict, got {type(checkpoint)}')
    if key is not None:
        if key not in checkpoint:
            raise KeyError(f"checkpoint has no '{key}' entry; it has: "
                           f'{sorted(checkpoint)}')
        return checkpoint[key]
    for candidate in STATE_DICT_KEYS:
        if isinstance(checkpoint.get(candidate), dict):
            return checkpoint[candidate]
    return checkpoint


def strip_prefix(state_dict: StateDict, prefix: str) -> StateDict:
    """Keep only keys that start with ``prefix`` and drop it."""
    if not prefix.endswith('.'):
        prefix += '.'
    return OrderedDict((k[len(prefix):], v) for k, v in state_dict.items()
                       if k.startswith(prefix))


def load_pretrained(model: nn.Module,
                    checkpoint: str,
                    prefix: Optional[str] = None,
                    state_dict_key: Optional[str] = None,
                    convert: Optional[Callable[[StateDict],
                                               StateDict]] = None,
                    map_location: str = 'cpu') -> LoadReport:
    """Load a pretrained file into ``model`` and report what happened.

    Args:
        model (nn.Module): The backbone to fill.
        checkpoint (str): Path or URL understood by mmengine's loaders.
        prefix (str, optional): Take only keys under this prefix (e.g.
            ``'backbone.'`` for a detector checkpoint). Default: None, which
            strips ``backbone.`` automatically when the file holds a whole
            detector or segmentor.
        state_dict_key (str, optional): Container inside the file, e.g.
            ``'model_ema'``. Default: None (auto).
        convert (callable, optional): Maps the file's key names (e.g. an
            official release's) to the model's. Default: None.
        map_location (str): Default: 'cpu'.

    Returns:
        LoadReport: Loaded, missing, unexpected and mismatched keys.

    Raises:
        RuntimeError: If no tensor of the file matches the model.
    """
    raw = CheckpointLoader.load_checkpoint(checkpoint, map_location)
    state_dict = unwrap_state_dict(raw, state_dict_key)
    model_state = model.state_dict()
    if prefix:
        state_dict = strip_prefix(state_dict, prefix)
    elif not any(k in model_state for k in state_dict) and any(
            k.startswith('backbone.') for k in state_dict):
        state_dict = strip_prefix(state_dict, 'backbone.')
    if convert is not None:
        state_dict = convert(state_dict)
    state_dict = OrderedDict(state_dict)

    # Learned positional embeddings follow the model's grid.
    from .pos_embed import ResizablePosEmbed
    for name, module in model.named_modules():
        key = f'{name}.weight' if name else 'weight'
        if isinstance(module, ResizablePosEmbed) and key in state_dict:
            state_dict[key] = module.adapt_loaded(state_dict[key])

    report = LoadReport(checkpoint=str(checkpoint))
    loadable = OrderedDict()
    for key, value in state_dict.items():
        if key not in model_state:
            report.unexpected.append(key)
        elif model_state[key].shape != value.shape:
            report.mismatched.append(
                f'{key} {tuple(value.shape)} -> '
                f'{tuple(model_state[key].shape)}')
        else:
            loadable[key] = value
    if not loadable:
        sample = ', '.join(list(state_dict)[:8])
        raise RuntimeError(
            f'{checkpoint} matches none of the {type(model).__name__} '
            f'weights, so nothing would be loaded. First keys in the file: '
            f'[{sample}]; first keys of the model: '
            f'[{", ".join(list(model_state)[:8])}]. Is it a checkpoint of '
            f'this architecture (and, for another layout, does the family '
            f'converter in tools/model_converters/ know it)?')
    model.load_state_dict(loadable, strict=False)
    report.loaded = list(loadable)
    report.missing = [
        k for k in model_state
        if k not in state_dict and not k.endswith('num_batches_tracked')
    ]
    logger = MMLogger.get_current_instance()
    print_log(report.summary(), logger=logger)
    return report
