"""What the command-line tools share: reading a config as the tools do,
CPU-capable launching (the stock mmengine path assumes CUDA in several
places) and a clean end of every distributed run."""
import functools
import gc
import os
import os.path as osp
import threading
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist
from mmengine.config import Config, ConfigDict
from mmengine.logging import print_log

from .demo_config import make_demo_config
from .tasks import TASKS, task_of  # noqa: F401  (re-exported for the tools)


def replace_norm_type(node: Any, old: str, new: str) -> Any:
    """Recursively swap ``norm_cfg type=old`` for ``new`` in a config."""
    if isinstance(node, dict):
        if node.get('type') == old and set(node) <= {'type', 'requires_grad',
                                                     'eps', 'momentum'}:
            node['type'] = new
        for value in node.values():
            replace_norm_type(value, old, new)
    elif isinstance(node, (list, tuple)):
        for value in node:
            replace_norm_type(value, old, new)
    return node


def setup_launcher(cfg: Config, launcher: str) -> None:
    """Prepare ``cfg`` for ``launcher``, also on machines without a GPU.

    mmengine's own distributed setup calls ``torch.cuda.set_device`` and
    wraps the model with ``device_ids=[LOCAL_RANK]``, which fails on a CPU
    machine. Without CUDA we start a gloo process group ourselves (the
    Runner then skips its own init), wrap with CPU DDP and replace SyncBN
    (CUDA-only) by BN. With CUDA nothing changes.
    """
    cfg.launcher = launcher
    if launcher == 'none' or torch.cuda.is_available():
        return
    if launcher == 'slurm':
        # Map Slurm's variables onto torchrun's.
        os.environ.setdefault('RANK', os.environ['SLURM_PROCID'])
        os.environ.setdefault('WORLD_SIZE', os.environ['SLURM_NTASKS'])
        os.environ.setdefault('LOCAL_RANK', os.environ['SLURM_LOCALID'])
        os.environ.setdefault('MASTER_PORT', '29500')
        os.environ.setdefault('MASTER_ADDR', '127.0.0.1')
    elif launcher != 'pytorch':
        raise ValueError(f'launcher {launcher!r} is not supported on CPU')
    if not dist.is_initialized():
        dist.init_process_group(backend='gloo', init_method='env://')
    cfg.env_cfg = dict(cfg.get('env_cfg', {}), dist_cfg=dict(backend='gloo'))
    wrapper = dict(cfg.get('model_wrapper_cfg') or {})
    wrapper.setdefault('type', 'MMDistributedDataParallel')
    wrapper['device_ids'] = None
    wrapper.setdefault('broadcast_buffers', False)
    wrapper.setdefault('find_unused_parameters',
                       cfg.get('find_unused_parameters', False))
    cfg.model_wrapper_cfg = wrapper
    replace_norm_type(cfg.model, 'SyncBN', 'BN')
    print_log(
        f'CPU distributed run: gloo process group of {dist.get_world_size()}'
        ' processes, DistributedDataParallel on CPU, SyncBN -> BN.',
        logger='current')


def enable_amp(cfg: Config) -> None:
    """``--amp``: fp16 with loss scaling on CUDA; on CPU, bf16 autocast of
    the backbone and neck (see :class:`AutocastOptimWrapper`)."""
    if torch.cuda.is_available():
        cfg.optim_wrapper.type = 'AmpOptimWrapper'
        cfg.optim_wrapper.loss_scale = 'dynamic'
    else:
        _use_cpu_autocast(cfg.optim_wrapper)


def _use_cpu_autocast(optim_wrapper: dict) -> None:
    # Backbone and neck in bf16; heads (box decoding, mmcv ops) in fp32.
    optim_wrapper.pop('loss_scale', None)
    optim_wrapper.update(type='AutocastOptimWrapper', dtype='bfloat16',
                         modules=('backbone', 'neck'))


def adapt_to_device(cfg: Config) -> None:
    """Keep GPU-only settings from failing on a machine without CUDA.

    A config that asks for ``AmpOptimWrapper`` (fp16 + GradScaler, which
    mmengine asserts is on a GPU) gets bf16 autocast instead, with a note.
    """
    if torch.cuda.is_available():
        return
    optim_wrapper = cfg.get('optim_wrapper')
    if isinstance(optim_wrapper,
                  dict) and optim_wrapper.get('type') == 'AmpOptimWrapper':
        _use_cpu_autocast(optim_wrapper)
        print_log('No CUDA: AmpOptimWrapper (fp16) replaced by bf16 '
                  'AutocastOptimWrapper on backbone and neck.',
                  logger='current')


def add_checkpoint_check(cfg: Config) -> None:
    """Make the Runner refuse a checkpoint that would leave most of the
    model unloaded (:class:`~vitattn_mm.engine.CheckpointCheckHook`), unless
    the config registers that hook itself (e.g. with another
    ``min_loaded_ratio``)."""
    hooks = list(cfg.get('custom_hooks') or [])
    if not any(hook.get('type') in ('CheckpointCheckHook',
                                     'vitattn_mm.CheckpointCheckHook')
               for hook in hooks):
        hooks.append(dict(type='CheckpointCheckHook'))
        cfg.custom_hooks = hooks


def load_tool_config(path: str,
                     work_dir: Optional[str] = None,
                     cfg_options: Optional[dict] = None,
                     demo_root: Optional[str] = None,
                     demo_iters: int = 20) -> Config:
    """Read a config as ``tools/train.py`` / ``tools/test.py`` do.

    Adds :class:`~vitattn_mm.engine.RandomStateHook` as
    ``default_hooks.random_state`` (exact ``--resume``); a config or
    ``--cfg-options default_hooks.random_state=None`` can turn it off.

    Args:
        path (str): Config file.
        work_dir (str, optional): Overrides the config's; by default
            ``./work_dirs/<config name>``.
        cfg_options (dict, optional): ``--cfg-options`` to merge.
        demo_root (str, optional): Run on the demo data under this root
            (generated if missing). Default: None.
        demo_iters (int): Training iterations of a demo run. Default: 20.

    Checkpoints the Runner loads (``load_from``, ``--resume``) are checked
    by :func:`add_checkpoint_check`.
    """
    cfg = Config.fromfile(path)
    if demo_root:
        # Lazy: importing the datasets imports vitattn_mm and its models.
        from vitattn_mm.datasets import generate_demo_data
        generate_demo_data(demo_root)
        cfg = make_demo_config(cfg, data_root=demo_root, max_iters=demo_iters)
    cfg.default_hooks = cfg.get('default_hooks') or ConfigDict()
    cfg.default_hooks.setdefault('random_state',
                                 ConfigDict(type='RandomStateHook'))
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    if cfg.default_hooks.get('random_state', ...) is None:
        # mmengine only accepts None for the hooks it adds itself.
        cfg.default_hooks.pop('random_state')
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(path))[0])
    add_checkpoint_check(cfg)
    return cfg


#: How long a rank that failed waits for its process group to shut down
#: before it leaves the rest to the process exit (seconds).
ERROR_TEARDOWN_TIMEOUT = 5.


def end_process_group(after_error: bool = False) -> None:
    """Shut down the default process group, if one is running.

    After a successful run every rank first collects its garbage, then
    meets the others at a barrier, so no rank closes its connections while
    another still has collective work in flight, then destroys the group,
    as torch asks of every program before it exits. The collection frees
    what only reference cycles keep alive (a Runner and its DDP-wrapped
    model, whose reducer holds the group): destroying the group does not
    stop its gloo threads while such an object holds it, and left to the
    interpreter's exit their teardown can kill a rank with ``terminate
    called without an active exception`` (SIGABRT) after the job's work is
    done.

    After an error the other ranks may never reach a barrier, and shutting
    down with work still pending can block: the group is destroyed without
    one, for at most :data:`ERROR_TEARDOWN_TIMEOUT` seconds, so the failing
    rank still exits at once with its error (torchrun and ``srun
    --kill-on-bad-exit`` then end the others).

    Args:
        after_error (bool): The run failed on this rank. Default: False.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    if not after_error:
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()
        return
    teardown = threading.Thread(target=_destroy_quietly, daemon=True)
    teardown.start()
    teardown.join(ERROR_TEARDOWN_TIMEOUT)


def _destroy_quietly() -> None:
    try:
        dist.destroy_process_group()
    except Exception:  # the run's own error is the one to report
        pass


def ends_process_group(main: Callable) -> Callable:
    """Decorate a tool's ``main``: whatever it starts (mmengine's launcher,
    :func:`setup_launcher`), the default process group ends with it, on
    success and on error (:func:`end_process_group`). The one place every
    entry point that can run distributed shares."""

    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        try:
            result = main(*args, **kwargs)
        except BaseException:
            end_process_group(after_error=True)
            raise
        end_process_group()
        return result

    wrapper.ends_process_group = True
    return wrapper
