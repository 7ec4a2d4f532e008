"""Which implementation an attention runs: its eager PyTorch composition or
its fused custom op (Triton kernels).

``attn_backend`` is ``'auto'`` (the default), ``'eager'`` or ``'triton'``:

* ``'eager'``: the PyTorch composition (the reference, and what ONNX
  export and FLOP counting see);
* ``'triton'``: the custom op, whose CUDA kernels are Triton's; on the CPU
  it runs the kernels in Triton's interpreter when ``TRITON_INTERPRET=1``
  (how the tests check them) and the eager composition otherwise; on the
  meta device its shape function (the cost model);
* ``'auto'``: what a GPU measured faster. Today that is the eager
  composition on every device: on an H200 (bf16, batch 2, 800x1280) every
  family's fused training step was slower than its eager one (MSF 0.86x,
  FLatten 0.89x, L2ViT 0.76x, LaViT 0.60x) though lighter (peak memory
  0.66x-0.86x; ``benchmarks/gpu_runs/``, docs/benchmarks.md), so
  :data:`AUTO_FUSES_ON_CUDA` is False and ``'triton'`` is the choice where
  memory, not time, is short. Were it True, 'auto' would run Triton on CUDA
  tensors when ``triton`` imports, except the flash-style ops (mean-shift
  attention, ``softmax_apply``) on fp32 inputs, whose dots Triton runs
  without tensor cores (``input_precision='ieee'``, eager fp32's
  precision): 8.7x SDPA's time in fp32 on the H200. The choice is logged
  once per process and device.
"""
import contextlib
import functools
import importlib
import os
from types import ModuleType
from typing import Iterable, Iterator, Optional

import torch
import torch.nn as nn
from mmengine.logging import print_log

BACKENDS = ('auto', 'eager', 'triton')


def check_backend(name: str) -> str:
    """``name``, or a ValueError listing the backends."""
    if name not in BACKENDS:
        raise ValueError(f'attn_backend must be one of {BACKENDS}, got '
                         f'{name!r}')
    return name


@functools.lru_cache(maxsize=None)
def triton_importable() -> Optional[str]:
    """None if ``triton`` imports, else why not."""
    try:
        importlib.import_module('triton')
    except Exception as error:  # ImportError, or a broken install
        return f'{type(error).__name__}: {error}'
    return None


def interpreting() -> bool:
    """Whether Triton kernels run in its interpreter (on the CPU)."""
    return os.environ.get('TRITON_INTERPRET', '0') not in ('', '0')


#: Set inside :func:`kernel_path_forced`.
_KERNEL_PATH_FORCED = False


def kernels_run_on(device: torch.device) -> bool:
    """Whether this process can run the Triton kernels on ``device``."""
    if triton_importable() is not None:
        return False
    return _KERNEL_PATH_FORCED or device.type == 'cuda' or (
        device.type == 'cpu' and interpreting())


@contextlib.contextmanager
def kernel_path_forced() -> Iterator[None]:
    """Every op takes its kernel path on any device inside the context:
    how ``tools/compile_kernels.py`` hands each launch of a CPU step to
    Triton's compiler (it replaces the launches; nothing runs)."""
    global _KERNEL_PATH_FORCED
    saved, _KERNEL_PATH_FORCED = _KERNEL_PATH_FORCED, True
    try:
        yield
    finally:
        _KERNEL_PATH_FORCED = saved


_LOGGED = set()

#: Whether 'auto' runs the fused ops on CUDA. Set from GPU measurements
#: only (``benchmarks/gpu_suite.py --only backends``): False while every
#: fused step measured is slower than its eager composition.
AUTO_FUSES_ON_CUDA = False


def uses_fused_op(backend: str, device: torch.device,
                  matmul_dtype: Optional[torch.dtype] = None) -> bool:
    """Whether an attention with ``attn_backend=backend`` calls its custom
    op for tensors on ``device`` (see the module docstring). A flash-style
    op passes the dtype of its dots' inputs as ``matmul_dtype``: 'auto'
    keeps fp32 ones eager."""
    if backend == 'eager':
        return False
    if backend == 'triton':
        return True
    if matmul_dtype == torch.float32:
        return False
    fused = AUTO_FUSES_ON_CUDA and device.type == 'cuda' and \
        triton_importable() is None
    # Said once, eagerly (a graph being captured neither logs nor reads
    # what was said: no break, no guard).
    if not torch.compiler.is_compiling():
        _say_once(device, fused)
    return fused


def _say_once(device: torch.device, fused: bool) -> None:
    if device.type in _LOGGED or device.type == 'meta':
        return
    _LOGGED.add(device.type)
    if fused or device.type != 'cuda':
        why = ''
    elif not AUTO_FUSES_ON_CUDA:
        why = (' (the fused ops measured slower on a GPU; '
               "attn_backend='triton' takes them, for less memory)")
    else:
        why = f' (triton does not import: {triton_importable()})'
    print_log(f"attn_backend='auto' on {device.type}: "
              f"{'triton' if fused else 'eager'}{why}", logger='current')


@contextlib.contextmanager
def eager_attention(model: nn.Module) -> Iterator[nn.Module]:
    """Every attention of ``model`` on its eager composition inside the
    context (ONNX export: an exporter knows aten ops, not this package's
    custom ops), its own ``attn_backend`` again after."""
    saved = [(m, m.attn_backend) for m in model.modules()
             if isinstance(getattr(m, 'attn_backend', None), str)]
    try:
        for module, _ in saved:
            module.attn_backend = 'eager'
        yield model
    finally:
        for module, backend in saved:
            module.attn_backend = backend


def kernel_module(module: str, names: Iterable[str]) -> ModuleType:
    """``vitattn_mm.ops.<module>``, a kernel module, checked to have the
    launch settings ``names`` (module attributes its op reads at every
    launch: ``BLOCK_N``, ``NUM_WARPS`` ...); ImportError for no such
    module, AttributeError naming the settings it lacks."""
    target = importlib.import_module(f'{__package__}.{module}')
    unknown = [name for name in names if not hasattr(target, name)]
    if unknown:
        raise AttributeError(f'{module} has no launch setting {unknown}')
    return target


@contextlib.contextmanager
def launch_settings(module: str, **values) -> Iterator[None]:
    """A kernel module's launch settings set to ``values`` inside the
    context (the GPU suite's tuning), its own after."""
    target = kernel_module(module, values)
    saved = {name: getattr(target, name) for name in values}
    try:
        for name, value in values.items():
            setattr(target, name, value)
        yield
    finally:
        for name, value in saved.items():
            setattr(target, name, value)
