"""Checkpoint files a training run can always resume from: each written
whole or not at all, and a latest one that does not read skipped for the
newest that does."""
import logging
import os
import os.path as osp
import re
from typing import Optional

from mmengine.dist import is_main_process
from mmengine.logging import print_log
from mmengine.runner.checkpoint import find_latest_checkpoint

from .files import InvalidCheckpointError, check_checkpoint_file

#: The files mmengine's ``CheckpointHook`` names by default.
_STEP_FILE = re.compile(r'^(?:epoch|iter)_(\d+)\.pth$')


def save_checkpoints_atomically(runner) -> None:
    """Make ``runner.save_checkpoint`` write a local file under a temporary
    name, flush it to disk and rename it into place: a kill or a full disk
    during the write leaves the previous checkpoints, and mmengine's
    ``CheckpointHook`` writes ``last_checkpoint`` only after the rename
    (it does so when ``save_checkpoint`` returns). Remote destinations
    (``s3://`` ...) are written as before. Idempotent."""
    save = getattr(runner, 'save_checkpoint', None)
    if save is None or getattr(save, 'atomic', False):
        return

    def atomic_save(out_dir, filename, *args, **kwargs):
        if '://' in str(out_dir):
            return save(out_dir, filename, *args, **kwargs)
        partial = f'{filename}.partial'
        save(out_dir, partial, *args, **kwargs)
        path = osp.join(out_dir, partial)
        # Only the main process writes (and renames: the others may see
        # its file on a shared disk).
        if is_main_process() and osp.isfile(path):
            with open(path, 'rb+') as f:
                os.fsync(f.fileno())
            os.replace(path, osp.join(out_dir, filename))

    atomic_save.atomic = True
    runner.save_checkpoint = atomic_save


def whole_latest_checkpoint(work_dir: str) -> Optional[str]:
    """The checkpoint ``--resume`` (with no file given) should resume from:
    the one ``last_checkpoint`` names if it reads, else the newest
    ``epoch_*.pth`` / ``iter_*.pth`` beside it that reads (both files named
    in a warning); None without ``last_checkpoint``.

    Raises:
        InvalidCheckpointError: when no checkpoint of the run reads.
    """
    latest = find_latest_checkpoint(work_dir)
    if latest is None or not osp.isfile(latest):
        return latest
    try:
        check_checkpoint_file(latest)
        return latest
    except Exception as error:  # cut short, corrupt: say so, look further
        problem = f'{type(error).__name__}: {error}'
    folder = osp.dirname(latest) or work_dir
    steps = sorted(((int(m.group(1)), name) for name in os.listdir(folder)
                    if (m := _STEP_FILE.match(name))), reverse=True)
    for _, name in steps:
        candidate = osp.join(folder, name)
        if osp.abspath(candidate) == osp.abspath(latest):
            continue
        try:
            check_checkpoint_file(candidate)
        except Exception:
            continue
        print_log(f'The latest checkpoint {latest} does not read '
                  f'({problem}); resuming from {candidate}, the newest whole '
                  'checkpoint of the run.', logger='current',
                  level=logging.WARNING)
        return candidate
    raise InvalidCheckpointError(
        f'Cannot resume: the latest checkpoint {latest} does not read '
        f'({problem}) and no other epoch_*.pth / iter_*.pth in {folder} '
        'does. Start again, or give --resume a file that reads.')
