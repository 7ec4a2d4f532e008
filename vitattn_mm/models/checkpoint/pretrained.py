"""Loading pretrained backbone weights, loudly.

mmengine's ``Pretrained`` initialiser unwraps only ``state_dict`` and loads
with ``strict=False``, so an official ``{'model': ...}`` file silently loads
nothing. :func:`load_pretrained` unwraps the usual containers, strips a
``backbone.`` prefix, adapts the tensors as every load does (official
layouts converted, older layouts migrated, position tables resized: the
backbones' ``adapt_state_dict``), and reports what was loaded, missing,
unexpected or skipped for a shape mismatch. A file that matches no key, or
fills less than ``min_loaded_ratio`` (default half) of the model's weights,
raises, and nothing is loaded.
"""
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
from mmengine.logging import MMLogger, print_log

from .files import load_checkpoint_file

StateDict = Dict[str, torch.Tensor]

#: Where a state dict's metadata records a backbone's layout (the
#: backbones' ``layout``; the module ``version`` slot is torch's).
LAYOUT_KEY = 'vitattn_layout'

#: Containers tried, in order, when a checkpoint file is a dict of dicts.
STATE_DICT_KEYS = ('state_dict', 'model', 'module')

#: Default smallest fraction of a model's weights (elements of its
#: floating-point parameters and buffers) a checkpoint must fill. Below it
#: the load is almost surely the wrong file or layout (another architecture,
#: an official file given to a whole model ...), and the model would run
#: with mostly random weights. Weights rather than tensors: a file of a
#: related family can fill many small tensors (norms, biases) and little
#: else, e.g. a FLatten-PVT-T file fills 100 of LaViT-T's 175 tensors but
#: 27% of its weights.
MIN_LOADED_RATIO = 0.5


@dataclass
class LoadReport:
    """What loading a checkpoint into a model did (or would do).

    ``total`` counts the model's tensors (parameters and persistent buffers
    other than BatchNorm's ``num_batches_tracked``), ``total_numel`` the
    elements of the floating-point ones (its weights), ``loaded_numel``
    those the checkpoint fills.
    """
    checkpoint: str
    model: str = ''
    total: int = 0
    total_numel: int = 0
    loaded_numel: int = 0
    loaded: List[str] = field(default_factory=list)
    missing: List[str] = field(default_factory=list)
    #: Backbone parameters the file does not fill (output norms aside).
    missing_backbone: List[str] = field(default_factory=list)
    unexpected: List[str] = field(default_factory=list)
    mismatched: List[str] = field(default_factory=list)

    @property
    def loaded_ratio(self) -> float:
        """Fraction of the model's weights the checkpoint fills."""
        return self.loaded_numel / max(self.total_numel, 1)

    def summary(self, max_keys: int = 20) -> str:
        """The counts, and the first ``max_keys`` keys of each kind."""
        return '\n'.join([
            f'Loaded {len(self.loaded)} of {self.total} tensors of '
            f'{self.model} ({self.loaded_ratio:.0%} of its weights) from '
            f'{self.checkpoint}.', *self._key_lines(max_keys)
        ])

    def _key_lines(self, max_keys: int) -> List[str]:

        def fmt(keys):
            more = f' ... (+{len(keys) - max_keys})' if len(
                keys) > max_keys else ''
            return ', '.join(keys[:max_keys]) + more

        lines = []
        if self.missing:
            lines.append(f'Missing in checkpoint ({len(self.missing)}): '
                         f'{fmt(self.missing)}')
        if self.unexpected:
            lines.append(f'Unexpected in checkpoint ({len(self.unexpected)}):'
                         f' {fmt(self.unexpected)}')
        if self.mismatched:
            lines.append(f'Skipped for shape mismatch '
                         f'({len(self.mismatched)}): {fmt(self.mismatched)}')
        return lines

    def fills(self, min_loaded_ratio: float = MIN_LOADED_RATIO) -> bool:
        """Whether some tensor and ``min_loaded_ratio`` of the weights are
        filled, and (unless ``min_loaded_ratio`` is 0: a partial load
        asked for) every backbone parameter but the output norms."""
        if min_loaded_ratio > 0 and self.missing_backbone:
            return False
        return bool(self.loaded) and self.loaded_ratio >= min_loaded_ratio

    def check(self, min_loaded_ratio: float = MIN_LOADED_RATIO,
              hint: str = '') -> None:
        """Raise unless the checkpoint fills at least ``min_loaded_ratio`` of
        the model's weights (and always when it fills no tensor).

        Args:
            min_loaded_ratio (float): Smallest accepted fraction, 0 to 1.
                Default: :data:`MIN_LOADED_RATIO`.
            hint (str): Appended to the error: what to do instead.
                Default: ''.

        Raises:
            RuntimeError: Naming the loaded / total, missing, unexpected and
                mismatched counts.
        """
        if self.fills(min_loaded_ratio):
            return
        if self.loaded and self.loaded_ratio >= min_loaded_ratio:
            shown = ', '.join(self.missing_backbone[:8]) + (
                f' ... (+{len(self.missing_backbone) - 8})'
                if len(self.missing_backbone) > 8 else '')
            raise RuntimeError('\n'.join([
                f'{self.checkpoint} leaves {len(self.missing_backbone)} '
                f'backbone parameters of {self.model} at their random '
                f'initial values: {shown} (it fills '
                f'{self.loaded_ratio:.1%} of the weights). Is it of the '
                'same architecture (the same attention in every block)?',
                *([hint] if hint else [])]))
        if not self.loaded:
            verdict = (f'{self.checkpoint} matches none of the {self.total} '
                       f'{self.model} tensors, so nothing would be loaded')
        else:
            verdict = (
                f'{self.checkpoint} fills only {len(self.loaded)} of the '
                f'{self.total} {self.model} tensors, '
                f'{self.loaded_ratio:.0%} of its weights (below '
                f'min_loaded_ratio={min_loaded_ratio:g}): '
                f'{len(self.missing)} missing, {len(self.unexpected)} '
                f'unexpected, {len(self.mismatched)} of another shape. The '
                'rest would keep random values')
        raise RuntimeError('\n'.join([f'{verdict}.', *self._key_lines(8),
                                      *([hint] if hint else [])]))


def adapt_for_model(model: nn.Module, state_dict: StateDict) -> StateDict:
    """A copy of a model's state dict with every backbone's part adapted as
    loading it will adapt it (each module with ``adapt_state_dict``, see
    :meth:`~vitattn_mm.models.backbones.StagedBackbone.adapt_state_dict`),
    to see what a load fills before it runs."""
    metadata = getattr(state_dict, '_metadata', None) or {}
    adapted = OrderedDict(state_dict)
    adapted._metadata = OrderedDict(metadata)
    for name, module in model.named_modules():
        adapt = getattr(module, 'adapt_state_dict', None)
        if callable(adapt):
            adapt(adapted, f'{name}.' if name else '',
                  metadata.get(name, {}).get(LAYOUT_KEY))
            # Marked as adapted: loading it adapts nothing again.
            adapted._metadata[name] = dict(metadata.get(name, {}),
                                           **{LAYOUT_KEY: module.layout})
    return adapted


def match_state_dict(model: nn.Module, state_dict: StateDict,
                     checkpoint: str = 'checkpoint'
                     ) -> Tuple[StateDict, LoadReport]:
    """Sort a state dict (already adapted, :func:`adapt_for_model`)
    against ``model`` as loading it would.

    Args:
        model (nn.Module): The model to fill.
        state_dict (dict): Tensors under the model's key names.
        checkpoint (str): Name of the source, for messages.
            Default: 'checkpoint'.

    Returns:
        tuple(dict, LoadReport): The loadable tensors, and the report.
    """
    model_state = model.state_dict()
    # BatchNorm's step counters are loaded but not counted as weights.
    counted = [k for k in model_state if not k.endswith('num_batches_tracked')]
    numel = {k: v.numel() for k, v in model_state.items()
             if v.is_floating_point()}
    report = LoadReport(checkpoint=str(checkpoint),
                        model=type(model).__name__,
                        total=len(counted),
                        total_numel=sum(numel.values()))
    loadable = OrderedDict()
    for key, value in state_dict.items():
        if key not in model_state or not isinstance(value, torch.Tensor):
            report.unexpected.append(key)
        elif model_state[key].shape != value.shape:
            report.mismatched.append(
                f'{key} {tuple(value.shape)} -> '
                f'{tuple(model_state[key].shape)}')
        else:
            loadable[key] = value
    report.loaded = [
        k for k in loadable if not k.endswith('num_batches_tracked')]
    report.missing = [k for k in counted if k not in state_dict]
    report.missing_backbone = [k for k in backbone_parameters(model)
                               if k not in loadable]
    report.loaded_numel = sum(numel.get(k, 0) for k in loadable)
    return loadable, report


def backbone_parameters(model: nn.Module) -> List[str]:
    """The keys of the parameters a load must fill: those of every
    backbone in ``model`` (a module that adapts what it loads), but the
    output norms (``norm{i}``), which a detection or segmentation backbone
    adds to a classifier's."""
    keys = []
    for name, module in model.named_modules():
        if not callable(getattr(module, 'adapt_state_dict', None)):
            continue
        prefix = f'{name}.' if name else ''
        keys += [prefix + k for k, _ in module.named_parameters()
                 if not re.match(r'norm\d+\.', k)]
    return keys


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
                    map_location: str = 'cpu',
                    min_loaded_ratio: float = MIN_LOADED_RATIO) -> LoadReport:
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
        map_location (str): Default: 'cpu'.
        min_loaded_ratio (float): Smallest fraction of the model's weights
            (elements of its floating-point tensors) the file must fill; 0
            accepts any partial load (a file that fills no tensor is refused
            regardless). Default: 0.5.

    Returns:
        LoadReport: Loaded, missing, unexpected and mismatched keys.

    Raises:
        RuntimeError: If no tensor of the file matches the model, or less
            than ``min_loaded_ratio`` of the model's weights would be filled
            (nothing is loaded then).
    """
    raw = load_checkpoint_file(checkpoint, map_location)
    state_dict = unwrap_state_dict(raw, state_dict_key)
    model_keys = model.state_dict().keys()
    if prefix:
        state_dict = strip_prefix(state_dict, prefix)
    elif not any(k in model_keys for k in state_dict) and any(
            k.startswith('backbone.') for k in state_dict):
        state_dict = strip_prefix(state_dict, 'backbone.')
    state_dict = adapt_for_model(model, state_dict)
    loadable, report = match_state_dict(model, state_dict, checkpoint)
    report.check(
        min_loaded_ratio,
        hint=(f'First keys in the file: [{", ".join(list(state_dict)[:8])}]; '
              f'first keys of the model: [{", ".join(list(model_keys)[:8])}]'
              '. Is it a checkpoint of this architecture (and, for an '
              'official layout, does the backbone convert it: '
              'convert_weights=True)? To accept a partial load on purpose, '
              'lower min_loaded_ratio in the init_cfg (e.g. 0).'))
    # Adapted already (its metadata says so): loading adapts nothing again.
    loadable._metadata = state_dict._metadata
    model.load_state_dict(loadable, strict=False)
    print_log(report.summary(), logger=MMLogger.get_current_instance())
    return report
