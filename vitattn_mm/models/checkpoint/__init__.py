"""Checkpoints, in one place: reading a file safely (``files``), the one
transformation every backbone applies to what it loads (``adapt``),
pretrained loads with their report and refusal (``pretrained``), and the
Runner's side (``guard``: ``CheckpointCheckHook``; ``runs``: checkpoints
written whole, a resume past one cut short). ``guard`` and ``runs`` use
the backbones and are imported by :mod:`vitattn_mm.engine`."""
from .files import (InvalidCheckpointError, UnsafeCheckpointError,
                    allow_checkpoint_types, check_checkpoint_file,
                    load_checkpoint_file)
from .pretrained import (LAYOUT_KEY, MIN_LOADED_RATIO, LoadReport,
                         load_pretrained)

__all__ = [
    'InvalidCheckpointError', 'UnsafeCheckpointError',
    'allow_checkpoint_types', 'check_checkpoint_file', 'load_checkpoint_file',
    'LAYOUT_KEY', 'MIN_LOADED_RATIO', 'LoadReport', 'load_pretrained'
]
