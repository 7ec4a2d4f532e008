"""Weights-only checkpoint loading that still reads mmengine's own files.

torch >= 2.6 loads with ``weights_only=True`` by default, and mmengine 0.10.7
calls ``torch.load`` without the argument. Its checkpoints pickle numpy
arrays and :class:`~mmengine.logging.HistoryBuffer` objects (whose state
references the buffer's statistics methods through ``getattr``), so
``tools/test.py``, ``load_from`` and ``--resume`` fail on files mmengine wrote
itself.

Every load stays weights-only, through mmengine's loader as it is (nothing
is patched): :func:`allow_checkpoint_types`, called when the package is
imported, adds to torch's allowlist (``torch.serialization.add_safe_globals``)
exactly the data types such files hold, plus the plain option containers
the official training scripts save beside their weights
(``argparse.Namespace``; FLatten's yacs ``CfgNode``, read as a harmless dict
stand-in without importing yacs). ``getattr`` is never allowed in general
(it reaches arbitrary attributes and so code execution); it is replaced by a
resolver that answers only ``getattr(HistoryBuffer, <registered statistics
method>)``.

Where this package reads a file (``init_cfg``, the converters, and the
``load_from`` / ``resume`` file through
:class:`~vitattn_mm.engine.CheckpointCheckHook` before the Runner loads
it), one that cannot be loaded is described (:func:`load_checkpoint_file`,
:func:`check_checkpoint_file`): empty, not a checkpoint at all, a plain
pickle rather than a PyTorch checkpoint, damaged (truncated or corrupt) —
:class:`InvalidCheckpointError` — or a checkpoint that needs code beyond
the allowlist — :class:`UnsafeCheckpointError`, naming what it needs.
"""
import argparse
import os.path as osp
import pickle
import pickletools
import re
import zipfile
from collections import OrderedDict
from typing import Optional

import numpy as np
import torch
from mmengine.logging import HistoryBuffer
from mmengine.runner.checkpoint import CheckpointLoader


class UnsafeCheckpointError(pickle.UnpicklingError):
    """A checkpoint would need arbitrary code to be unpickled."""


class InvalidCheckpointError(ValueError):
    """A file is not a loadable checkpoint: empty, not a checkpoint, a plain
    pickle, or truncated / corrupt."""


_HISTORY_BUFFER_STATISTICS = ('min', 'max', 'current', 'mean')


def _history_buffer_getattr(obj, name):
    """``getattr`` limited to HistoryBuffer's statistics methods."""
    if obj is HistoryBuffer and (name in _HISTORY_BUFFER_STATISTICS or
                                 name in HistoryBuffer._statistics_methods):
        return getattr(obj, name)
    raise UnsafeCheckpointError(
        f'checkpoint asks for getattr({obj!r}, {name!r}), which is not a '
        f'HistoryBuffer statistics method')


class YacsConfigStandIn:
    """What a pickled yacs ``CfgNode`` loads as: an ``OrderedDict`` of its
    options (nested alike), yacs's bookkeeping flags kept as attributes.

    FLatten's training script (from Swin's) saves its frozen yacs config
    under ``'config'``. Mapping the pickled name ``yacs.config.CfgNode`` to
    this factory reads such files without yacs installed and without running
    any yacs code. It returns an exact ``OrderedDict`` because torch's
    weights-only unpickler fills no other dict type.
    """

    def __new__(cls, *args, **kwargs):
        return OrderedDict()


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
    # The official training scripts' options, saved beside the weights:
    # MSF (torchvision reference) and L2ViT (ConvNeXt's) pickle their
    # argparse options under 'args', FLatten its yacs config under 'config'.
    # Both are plain containers of option values.
    argparse.Namespace,
    (YacsConfigStandIn, 'yacs.config.CfgNode'),
]

_ZIP_MAGIC = b'PK'
_PICKLE_PROTO = 0x80
#: How the weights-only unpickler names what it refused, most specific first.
_REFUSED_PATTERNS = (
    r'GLOBAL (\S+) was not an allowed global',
    r'unsupported GLOBAL (\S+) whose module',
    r'unrecognized function (.+?)(?: which belongs|$)',
    r'but got (<class .+?>)',
    r'checkpoint asks for (getattr\(.+?\)), which',
)


def diagnose_checkpoint_file(path: str) -> Optional[str]:
    """Say what is wrong with a checkpoint file's structure, if anything.

    Reads the file's framing only (the zip directory, or the opcodes of a
    pickle, never executing them).

    Args:
        path (str): A local file.

    Returns:
        str | None: Why the file is not a loadable checkpoint (empty, not a
        checkpoint, a plain pickle, truncated or corrupt), or None when it
        is framed as a PyTorch checkpoint.
    """
    size = osp.getsize(path)
    if size == 0:
        return ('the file is empty (0 bytes); the save or the download was '
                'interrupted')
    with open(path, 'rb') as f:
        head = f.read(2)
    if head == _ZIP_MAGIC:  # torch.save's format since torch 1.6
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
        except (zipfile.BadZipFile, OSError) as error:
            return (f'the file is truncated or corrupt: a damaged zip '
                    f'archive of {size} bytes ({error}); download or copy '
                    'it again')
        if not any(name.endswith('data.pkl') for name in names):
            return ('the file is a zip archive but not a PyTorch checkpoint '
                    f'(no data.pkl; it holds {names[:5]})')
        return None
    if head[0] != _PICKLE_PROTO:
        return (f'the file is not a checkpoint: neither a PyTorch zip '
                f'archive nor a pickle ({size} bytes starting with '
                f'{head!r})')
    # A pickle: torch's legacy format is the magic number, the protocol
    # version, system info and the object, pickled one after the other.
    try:
        with open(path, 'rb') as f:
            first = [arg for _, arg, _ in pickletools.genops(f)
                     if arg is not None]
            if first[-1:] != [torch.serialization.MAGIC_NUMBER]:
                return ('the file is a plain pickle, not a PyTorch '
                        'checkpoint (torch.save writes a zip archive); if '
                        'you trust it, unpickle it yourself and re-save its '
                        'tensors with torch.save')
            for _ in range(3):
                for _ in pickletools.genops(f):
                    pass
    except Exception as error:  # pickletools raises ValueError and others
        return (f'the file is truncated or corrupt: its pickle data breaks '
                f'off ({error}); download or copy it again')
    return None


def _refused_name(error: Exception) -> str:
    """The global, function or class the unpickler refused, in full."""
    message = str(error)
    for pattern in _REFUSED_PATTERNS:
        match = re.search(pattern, message, flags=re.MULTILINE)
        if match:
            return match.group(1)
    # torch puts its own reason after 'WeightsUnpickler error:'.
    reason = message.split('WeightsUnpickler error:')[-1].strip()
    return reason.splitlines()[0] if reason else message


def _explained(filename, error: Exception) -> Exception:
    """The error to raise for a file mmengine's loader could not read: what
    the file is, or what unpickling it needs; ``error`` itself otherwise."""
    problem = diagnose_checkpoint_file(filename) if isinstance(
        filename, str) and osp.isfile(filename) else None
    if problem is None and isinstance(error, EOFError):
        problem = 'the file is truncated (it ends too early)'
    if problem is None and 'PytorchStreamReader' in str(error):
        problem = f'the file is corrupt ({str(error).splitlines()[0]})'
    if problem is not None:
        return InvalidCheckpointError(
            f'Cannot load checkpoint {filename}: {problem}.')
    if not isinstance(error, pickle.UnpicklingError):
        return error
    return UnsafeCheckpointError(
        f'Refusing to load checkpoint {filename}: unpickling it needs '
        f'{_refused_name(error)}, which is not part of a weights file, and '
        'unpickling arbitrary objects can run code. Checkpoints load '
        'weights-only; tensors, numpy arrays, mmengine log buffers and the '
        'training options official releases save (argparse Namespace, yacs '
        'CfgNode) are accepted. If you created this file yourself and trust '
        'it, re-save just its tensors (torch.save({"state_dict": ...}))')


def load_checkpoint_file(filename: str, map_location='cpu'):
    """mmengine's ``CheckpointLoader.load_checkpoint`` (any path or URL,
    weights-only), with a file it cannot read described (see the module
    docstring)."""
    try:
        return CheckpointLoader.load_checkpoint(filename, map_location)
    except Exception as error:  # re-raised, explained where we can
        explained = _explained(filename, error)
        if explained is error:
            raise
        raise explained from error


def check_checkpoint_file(filename: str) -> None:
    """Raise the described error :func:`load_checkpoint_file` would raise
    for a local file, without reading its tensors (they are memory-mapped),
    so a Runner is told what is wrong before it loads the file."""
    if not osp.isfile(filename):
        return
    problem = diagnose_checkpoint_file(filename)
    if problem is not None:
        raise InvalidCheckpointError(
            f'Cannot load checkpoint {filename}: {problem}.')
    try:
        with open(filename, 'rb') as f:
            zipped = f.read(2) == _ZIP_MAGIC
        torch.load(filename, map_location='cpu', weights_only=True,
                   mmap=zipped)
    except Exception as error:  # re-raised, explained where we can
        explained = _explained(filename, error)
        if explained is error:
            raise
        raise explained from error


def allow_checkpoint_types() -> None:
    """Add the data types mmengine's checkpoints and the official releases
    hold to torch's weights-only allowlist (idempotent; called when
    :mod:`vitattn_mm` is imported)."""
    torch.serialization.add_safe_globals(SAFE_GLOBALS)
