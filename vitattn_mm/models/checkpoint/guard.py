"""Whole-model checkpoint loads that would leave the model mostly random
are refused; the checkpoints a run writes and resumes from are whole."""
import os.path as osp
import re
from collections import OrderedDict
from typing import Optional

import torch.nn as nn
from mmengine.hooks import Hook
from mmengine.model import BaseTTAModel, is_model_wrapper
from mmengine.registry import HOOKS

from ..backbones import packages
from ..backbones.base_backbone import StagedBackbone
from .pretrained import (MIN_LOADED_RATIO, adapt_for_model,
                              match_state_dict, unwrap_state_dict)
from .files import check_checkpoint_file
from .runs import save_checkpoints_atomically, whole_latest_checkpoint

#: What ``Runner.load_checkpoint`` does to the keys by default.
_RUNNER_REVISE_KEYS = ((r'^module.', ''), )


@HOOKS.register_module()
class CheckpointCheckHook(Hook):
    """Refuse a checkpoint that would leave most of the model unloaded;
    write checkpoints whole and resume from a whole one.

    The Runner loads ``load_from`` (so ``tools/test.py``'s checkpoint) and
    ``--resume`` files with ``strict=False``: an official release
    (``{'model': ...}`` with the authors' key names) or a file of another
    architecture loads nothing or almost nothing, a warning is logged and
    the model is trained or evaluated with random weights. This hook runs in
    ``after_load_checkpoint``, before the Runner copies the tensors, sorts
    them against the model as mmengine's loader will, and raises when less
    than ``min_loaded_ratio`` of the model's weights would be filled, with
    the counts and what to do instead (the converter command for an
    official layout, ``init_cfg`` for backbone weights).

    Before the run it also makes the Runner write each checkpoint under a
    temporary name and rename it into place (``last_checkpoint`` follows
    the rename), and makes ``--resume`` without a file skip a latest
    checkpoint that does not read (cut short by a kill or a full disk) for
    the newest one that does, naming both.

    ``tools/train.py``, ``tools/test.py`` and ``tools/demo.py`` add it to
    every config; a Runner built otherwise needs it in ``custom_hooks``.

    Args:
        min_loaded_ratio (float): Smallest fraction of the model's weights
            (elements of its floating-point parameters and buffers) a
            checkpoint must fill. The config key ``allow_partial_load =
            True`` lowers it to 0; a file that fills no tensor is refused
            regardless. Default: 0.5.
    """

    priority = 'VERY_HIGH'  # before hooks that use the loaded weights (EMA)

    def before_run(self, runner) -> None:
        """Checkpoints written whole or not at all
        (:func:`save_checkpoints_atomically`); an automatic resume from the
        newest checkpoint of the run that reads
        (:func:`whole_latest_checkpoint`); a ``load_from`` / resume file
        that cannot be loaded (empty, corrupt, a plain pickle, needing code
        to unpickle) described before the Runner's loader fails on it with
        a bare error."""
        save_checkpoints_atomically(runner)
        if getattr(runner, '_resume', False) and \
                getattr(runner, '_load_from', None) is None:
            # What the Runner would resume from, once it reads.
            runner._load_from = whole_latest_checkpoint(runner.work_dir)
        source = getattr(runner, '_load_from', None)
        if isinstance(source, str):
            check_checkpoint_file(source)

    def __init__(self, min_loaded_ratio: float = MIN_LOADED_RATIO):
        if not 0 <= min_loaded_ratio <= 1:
            raise ValueError(f'min_loaded_ratio must be in [0, 1], got '
                             f'{min_loaded_ratio}')
        self.min_loaded_ratio = min_loaded_ratio

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        """Adapt the file's tensors to the model once (official layouts
        converted, position tables resized...) and write them back for the
        Runner to load; refuse the load if they would leave the model
        mostly random. (Where it refuses, it converts the file once more,
        as a release of the backbone alone, to say how to load it.)"""
        model = runner.model
        # mmengine's load_state_dict fills the wrapped model.
        while is_model_wrapper(model) or isinstance(model, BaseTTAModel):
            model = model.module
        # As mmengine's _load_checkpoint_to_model reads the file.
        state_dict = checkpoint.get('state_dict', checkpoint)
        metadata = getattr(state_dict, '_metadata', None)
        for pattern, replacement in _RUNNER_REVISE_KEYS:
            state_dict = OrderedDict((re.sub(pattern, replacement, k), v)
                                     for k, v in state_dict.items())
        state_dict._metadata = metadata
        # Every backbone's part adapted once, here; the Runner then loads
        # this dict, whose metadata says it is adapted.
        state_dict = adapt_for_model(model, state_dict)
        source = runner.cfg.get('load_from') or 'the checkpoint'
        min_loaded_ratio = (0. if runner.cfg.get('allow_partial_load') else
                            self.min_loaded_ratio)
        _, report = match_state_dict(model, state_dict, source)
        if report.fills(min_loaded_ratio):
            checkpoint['state_dict'] = state_dict
            return
        hint = _advice(model, checkpoint, source)
        if hint is None:
            hint = "Is it a checkpoint of this config's model?"
            if report.loaded:
                hint += (' To load a partial checkpoint on purpose, set '
                         'allow_partial_load = True in the config '
                         '(--cfg-options allow_partial_load=True; '
                         'tools/test.py --allow-partial).')
        report.check(min_loaded_ratio, hint=hint)


def _advice(model: nn.Module, checkpoint: dict,
            source: str) -> Optional[str]:
    """Recognise an official release or backbone-only weights and say how
    to load them; None when the file is neither."""
    weights = unwrap_state_dict(checkpoint)
    if not isinstance(weights, dict):
        return None
    for name, backbone in model.named_modules():
        if not isinstance(backbone, StagedBackbone):
            continue
        own = backbone.state_dict().keys()
        try:
            converted = backbone.convert_official(OrderedDict(weights))
        except Exception:  # a layout the converter does not know
            converted = weights
        if converted.keys() != weights.keys() and \
                len(own & converted.keys()) * 2 >= len(own):
            return official_release_advice(backbone, name, source)
        prefixed = {f'{name}.{k}' for k in own}
        if len(own & weights.keys()) * 2 >= len(own) or \
                len(prefixed & weights.keys()) * 2 >= len(prefixed):
            return (f'It holds weights of the {name} alone. Load them with '
                    f"model.{name}.init_cfg=dict(type='Pretrained', "
                    f'checkpoint={source!r}) instead of load_from.')
    return None


def official_release_advice(backbone: nn.Module, name: str,
                            source: str) -> str:
    """How to load an official release of ``backbone``'s family into the
    model (whose backbone is ``model.<name>``): through ``init_cfg``, or by
    the family's converter command where it has one
    (``converter_command``)."""
    family = next(c for c in type(backbone).__mro__
                  if c.__module__ != packages.__name__)
    advice = (f'It is an official {family.__name__} release (the authors\' '
              'key names) of the backbone alone: load it with '
              f"model.{name}.init_cfg=dict(type='Pretrained', "
              f'checkpoint={source!r}) (converted on the fly)')
    command = backbone.converter_command
    if command is None:
        return advice + '.'
    target = osp.splitext(source)[0] + '_vitattn.pth'
    return (f'{advice}, or convert it once into a classifier checkpoint: '
            f'python {command} {source} {target}')
