"""Weights-only checkpoint loading that still reads mmengine's own files.

torch >= 2.6 loads with ``weights_only=True`` by default, and mmengine 0.10.7
calls ``torch.load`` without the argument. Its checkpoints pickle numpy
arrays and :class:`~mmengine.logging.HistoryBuffer` objects (whose state
references the buffer's statistics methods through ``getattr``), so
``tools/test.py``, ``load_from`` and ``--resume`` fail on files mmengine wrote
itself.

We keep every load weights-only and allowlist exactly the data types such
files hold. ``getattr`` is never allowed in general (it reaches arbitrary
attributes and so code execution); it is replaced by a resolver that answers
only ``getattr(HistoryBuffer, <registered statistics method>)``. A file that
needs anything else is refused with :class:`UnsafeCheckpointError`.
"""
import functools
import pickle

import numpy as np
import torch
from mmengine.logging import HistoryBuffer
from mmengine.runner.checkpoint import CheckpointLoader


class UnsafeCheckpointError(pickle.UnpicklingError):
    """A checkpoint would need arbitrary code to be unpickled."""


_HISTORY_BUFFER_STATISTICS = ('min', 'max', 'current', 'mean')


def _history_buffer_getattr(obj, name):
    """``getattr`` limited to HistoryBuffer's statistics methods."""
    if obj is HistoryBuffer and (name in _HISTORY_BUFFER_STATISTICS or
                                 name in HistoryBuffer._statistics_methods):
        return getattr(obj, name)
    raise UnsafeCheckpointError(
        f'checkpoint asks for getattr({obj!r}, {name!r}), which is not a '
        f'HistoryBuffer statistics method')


def _numpy_safe_globals():
    multiarray = np._core.multiarray if hasattr(
        np, '_core') else np.core.multiarray
    names = [multiarray._reconstruct, multiarray.scalar, np.ndarray, np.dtype]
    # numpy >= 1.25 pickles a dtype through its class (numpy.dtypes.*DType).
    for dtype in (np.bool_, np.uint8, np.int8, np.int16, np.int32, np.int64,
                  np.float16, np.float32, np.float64):
        names.append(type(np.dtype(dtype)))
    module_name = multiarray.__name__
    other = 'numpy.core.multiarray' if module_name.startswith(
        'numpy._core') else 'numpy._core.multiarray'
    # Files written under the other numpy major version name the module
    # differently; map both spellings to the same functions.
    names += [(multiarray._reconstruct, f'{other}._reconstruct'),
              (multiarray.scalar, f'{other}.scalar')]
    return names


SAFE_GLOBALS = [
    HistoryBuffer,
    (_history_buffer_getattr, 'builtins.getattr'),
    (_history_buffer_getattr, '__builtin__.getattr'),
    *_numpy_safe_globals(),
]


def _refuse_unsafe(loader):
    """Wrap an mmengine scheme loader: unpickling errors become clear."""

    @functools.wraps(loader)
    def load(filename, *args, **kwargs):
        try:
            return loader(filename, *args, **kwargs)
        except pickle.UnpicklingError as error:
            # torch wraps the unpickler's reason in a long generic text;
            # keep the line that names the offending global.
            lines = [line.strip() for line in str(error).splitlines()]
            detail = next((line for line in lines if line.startswith(
                ('Unsupported', 'checkpoint asks', 'Trying to'))),
                          lines[0] if lines else '')
            raise UnsafeCheckpointError(
                f'Refusing to load checkpoint {filename}: unpickling it would '
                f'run code that is not part of a weights file ({detail}). '
                'vitattn_mm loads every checkpoint weights-only; it accepts '
                'tensors, numpy arrays and mmengine log buffers. If you '
                'created this file yourself and trust it, re-save just its '
                'tensors (torch.save({"state_dict": ...}))') from error

    load._vitattn_mm_safe = True
    return load


def install_safe_checkpoint_loading() -> None:
    """Allowlist mmengine's data types and wrap every checkpoint scheme.

    Idempotent; called when :mod:`vitattn_mm` is imported.
    """
    torch.serialization.add_safe_globals(SAFE_GLOBALS)
    schemes = CheckpointLoader._schemes
    for prefix, loader in list(schemes.items()):
        if not getattr(loader, '_vitattn_mm_safe', False):
            schemes[prefix] = _refuse_unsafe(loader)
