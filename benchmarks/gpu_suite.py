"""Every family against its baseline on one device, in one timed run.

Prepared for a lent GPU (one H100, about 15 minutes in all, the setup
included): one command measures, within a time budget, and leaves CSV and
markdown tables behind even when it is cut short. Sections (``--only``):

* ``train``: training step (forward, backward of a scalar loss over the
  outputs, AdamW step) in fp32, bf16 autocast and fp16 autocast with
  ``torch.amp.GradScaler``, at 800x1280 and 512x2048 (batch 2): images/s
  and peak memory (``torch.cuda.max_memory_allocated``, reset per run), each
  as a ratio to the family's baseline measured in the same process.
  Beside each row, the cost model's projection (``benchmarks/cost_model.py``,
  an H100's parameters): projected step time and speed ratio, and the
  error of the projected ratio; where one is off by more than 25% the
  model's parameters are fitted to the run's step times and printed.
* ``backends``: every family's training step (bf16 on CUDA) with its
  attentions' eager composition and with the fused ops
  (``attn_backend='triton'``), same weights, side by side, each with its
  projection; a fused step that fails (a kernel that does not compile)
  is recorded in its row and the family falls back to eager.
* ``numerics``: 100 steps in fp16 autocast with dynamic loss scaling and 100
  in bf16 (512x512, batch 2, fixed random input and target, MSE of the
  outputs' spatial means): loss finite throughout, steps the scaler skipped,
  first and last loss.
* ``core``: each family's attention module alone on 16k-66k tokens at its
  stage-1 width, forward + backward time and peak memory, against fused
  softmax ``scaled_dot_product_attention`` on the same tokens and heads.
* ``compile``: inference latency at batch 1 (800x1280), eager vs
  ``torch.compile(dynamic=True)``, with graphs, graph breaks and the graphs
  compiled again while two more input sizes are fed.

Outputs in ``--out`` (default ``$OUT``): ``env.json``, ``train.csv``,
``numerics.csv``, ``core.csv``, ``compile.csv``, ``summary.md`` and
``steps.json`` (the projected steps, for benchmarks/calibrate.py). Each
section's CSV is rewritten after every measurement and ``summary.md`` after
every section, so a run stopped from outside still leaves its results. A
measurement that fails (out of memory, an unsupported op, over its time
limit) is recorded in its row and the run goes on; sections that the
budget (``--budget-s``) no longer covers leave rows marked ``skipped``.

Models are built by registry name: the classes that ``import vitattn_mm``
registered are taken from the OpenMMLab ``MODELS`` registries' tables and
instantiated. Neither ``Registry.get``/``build`` nor a default scope is used:
``get`` first imports the registry's ``locations`` (``mmdet.models`` ...),
and under a default scope mmcv's layer builders (``build_norm_layer``) go
through that scope's registry; those packages import ``mmcv.ops``, and the
GPU machine has mmcv without compiled ops. This script never imports
``mmdet.models``, ``mmseg.models``, ``mmpretrain.models`` or ``mmcv.ops``;
``env.json`` records whether anything else did.

Examples::

    # the GPU run (tools/gpu/run_suite.sh does the setup first)
    python benchmarks/gpu_suite.py --device cuda --out "$OUT" --budget-s 360
    # CPU rehearsal: tiny archs and sizes, every code path, < 60 s
    python benchmarks/gpu_suite.py --device cpu --smoke --out /tmp/gpu_smoke
    # rehearse the GPU machine's missing mmcv ops on the CPU
    python benchmarks/gpu_suite.py --device cpu --smoke --simulate-no-mmcv-ops
"""
import argparse
import contextlib
import copy
import csv
import gc
import importlib
import importlib.abc
import importlib.metadata
import importlib.util
import json
import logging
import math
import os
import os.path as osp
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
import cost_model  # noqa: E402  (beside this script)

SECTIONS = ('train', 'backends', 'numerics', 'core', 'compile')
#: Sections that run only when ``--only`` names them: a default run's files
#: are the most the device tool brings back (8).
EXTRA_SECTIONS = ('kernels', 'tuning')

#: Share of the budget each section is sure of (a section may use what the
#: ones before it left; the last takes the rest). Measured on no GPU yet:
#: these follow estimates of the step times, see docs/benchmarks.md.
SECTION_SHARES = dict(train=0.32, backends=0.10, numerics=0.22, core=0.10,
                      compile=0.26, kernels=0.3, tuning=0.5)

#: mmcv's compiled ops and the packages that may need them: this script
#: never imports them; env.json records which ``import vitattn_mm`` did.
FORBIDDEN_IMPORTS = ('mmcv.ops', 'mmcv._ext', 'mmdet.models', 'mmseg.models',
                     'mmpretrain.models')

Shape = Tuple[int, int]

# --------------------------------------------------------------- the models


@dataclass(frozen=True)
class ModelSpec:
    """A backbone of the suite.

    Args:
        label (str): Name in the tables.
        type (str): Registry name.
        arch (str): Arch name of the full run (checked against the class's
            ``arch_zoo`` in every run, the smoke run included).
        smoke_arch (dict): Small arch of ``--smoke`` runs (same class, same
            code paths, a fraction of the blocks and channels).
        role (str): 'family' or 'baseline'.
        baseline (str, optional): Label of a family's baseline.
    """
    label: str
    type: str
    arch: str
    smoke_arch: dict
    role: str = 'family'
    baseline: Optional[str] = None


_SWIN_SMOKE = dict(embed_dims=32, depths=[2, 2, 1, 1], num_heads=[1, 2, 4, 8])
_PVT_SMOKE = dict(embed_dims=[32, 64, 128, 256], depths=[1, 1, 1, 1],
                  num_heads=[1, 2, 4, 8], mlp_ratios=[2, 2, 2, 2])
_CSWIN_SMOKE = dict(embed_dims=32, depths=[1, 1, 2, 1],
                    num_heads=[2, 2, 4, 8])

#: Baseline first, then its families: the ratios exist as soon as a family
#: row is written, and a cut-short run loses whole pairs, not baselines.
MODEL_SPECS: List[ModelSpec] = [
    ModelSpec('Swin-T', 'AttnSwinTransformer', 'tiny', _SWIN_SMOKE,
              role='baseline'),
    ModelSpec('FLatten-Swin-T', 'FLattenSwinTransformer', 'tiny',
              _SWIN_SMOKE, baseline='Swin-T'),
    ModelSpec('L2ViT-T', 'L2ViT', 'tiny',
              dict(embed_dims=[32, 64, 128, 256], depths=[2, 2, 2, 2],
                   num_heads=[1, 2, 4, 8]), baseline='Swin-T'),
    ModelSpec('MSF-Swin-T', 'MSFSwinTransformer', 'tiny', _SWIN_SMOKE,
              baseline='Swin-T'),
    ModelSpec('PVT-T', 'AttnPVT', 'tiny', _PVT_SMOKE, role='baseline'),
    ModelSpec('FLatten-PVT-T', 'FLattenPVT', 'tiny', _PVT_SMOKE,
              baseline='PVT-T'),
    ModelSpec('PVT-S', 'AttnPVT', 'small', _PVT_SMOKE, role='baseline'),
    ModelSpec('LaViT-S', 'LaViT', 'small',
              dict(_PVT_SMOKE, depths=[1, 1, 3, 2], la_start=[0, 0, 2, 2]),
              baseline='PVT-S'),
    ModelSpec('PVTv2-B0', 'AttnPVTv2', 'b0', _PVT_SMOKE, role='baseline'),
    ModelSpec('FLatten-PVTv2-B0', 'FLattenPVTv2', 'b0', _PVT_SMOKE,
              baseline='PVTv2-B0'),
    ModelSpec('CSwin-T', 'AttnCSwinTransformer', 'tiny', _CSWIN_SMOKE,
              role='baseline'),
    ModelSpec('FLatten-CSwin-T', 'FLattenCSwinTransformer', 'tiny',
              _CSWIN_SMOKE, baseline='CSwin-T'),
]
SPECS = {spec.label: spec for spec in MODEL_SPECS}
FAMILIES = [s for s in MODEL_SPECS if s.role == 'family']
BASELINES = [s for s in MODEL_SPECS if s.role == 'baseline']


def registered_class(name: str) -> Tuple[Optional[type], str]:
    """The model class registered as ``name``, and where it was found.

    Looked up in the tables (``module_dict``) of mmdet's, mmseg's,
    mmpretrain's and mmengine's ``MODELS``: ``Registry.get`` would first
    import the registry's ``locations`` (``mmdet.models`` ...), which need
    mmcv's compiled ops.
    """
    from mmengine.registry import MODELS as ROOT
    for scope in ('mmdet', 'mmseg', 'mmpretrain'):
        try:
            registry = importlib.import_module(f'{scope}.registry').MODELS
        except ImportError:
            continue
        if name in registry.module_dict:
            return registry.module_dict[name], f'{scope}.registry.MODELS'
    if name in ROOT.module_dict:
        return ROOT.module_dict[name], 'mmengine.registry.MODELS'
    return None, ''


def check_arch(spec: ModelSpec) -> Optional[str]:
    """An error message if ``spec``'s class is unregistered or does not
    know its arch name; None if it does."""
    cls, _ = registered_class(spec.type)
    if cls is None:
        return f'{spec.type} is not registered (import vitattn_mm)'
    names = cls.arch_names() if hasattr(cls, 'arch_names') else [
        n for key in getattr(cls, 'arch_zoo', {})
        for n in ((key, ) if isinstance(key, str) else key)
    ]
    if spec.arch not in names:
        return (f'{spec.type} has no arch {spec.arch!r}; it has '
                f'{sorted(names)}')
    return None


def build_model(spec: ModelSpec, smoke: bool, **kwargs) -> nn.Module:
    """``spec``'s backbone, by registry name, with random weights."""
    cls, _ = registered_class(spec.type)
    if cls is None:
        raise KeyError(f'{spec.type} is not registered')
    arch = copy.deepcopy(spec.smoke_arch) if smoke else spec.arch
    return cls(arch=arch, **kwargs)


def backend_modules(model: nn.Module) -> List[nn.Module]:
    """The modules of ``model`` that choose a backend (its attentions with
    a fused op, and the backbone that hands them its choice)."""
    return [m for m in model.modules()
            if isinstance(getattr(m, 'attn_backend', None), str)]


def set_backend(model: nn.Module, backend: str) -> None:
    """Every attention of ``model`` on ``backend`` (its weights kept)."""
    for module in backend_modules(model):
        module.attn_backend = backend


def resolved_backend(model: nn.Module, device: torch.device) -> str:
    """What ``model``'s attentions run on ``device``: 'triton' (the fused
    ops), 'eager', or '' for a model with no fused attention."""
    from vitattn_mm.ops import uses_fused_op
    backends = {m.attn_backend for m in backend_modules(model)
                if not hasattr(m, 'arch_zoo')}
    if not backends:
        return ''
    return '/'.join(sorted({'triton' if uses_fused_op(b, device) else
                            'eager' for b in backends}))


# ------------------------------------------------------------- the settings


@dataclass
class Settings:
    """Sizes and step counts of a run (:meth:`full` or :meth:`smoke`)."""
    resolutions: List[Shape]
    batch: int
    train_warmup: int
    train_steps: int
    train_limit_s: float
    numerics_shape: Shape
    numerics_batch: int
    numerics_steps: int
    numerics_limit_s: float
    core_grids: List[Shape]
    core_batch: int
    core_warmup: int
    core_repeats: int
    core_limit_s: float
    compile_shapes: List[Shape]
    compile_backend: str
    compile_warmup: int
    compile_repeats: int
    compile_limit_s: float
    #: Labels of the models the compile section compiles (None: all).
    compile_models: Optional[Tuple[str, ...]] = None
    lr: float = 1e-4
    #: The kernels section: profiled steps, kernels listed per step.
    kernel_steps: int = 3
    kernel_top: int = 10
    #: The tuning section: how many of each module's settings it tries.
    tuning_settings: int = 7

    @classmethod
    def full(cls) -> 'Settings':
        return cls(
            resolutions=[(800, 1280), (512, 2048)], batch=2,
            train_warmup=3, train_steps=8, train_limit_s=45,
            numerics_shape=(512, 512), numerics_batch=2, numerics_steps=100,
            numerics_limit_s=60,
            core_grids=[(128, 128), (200, 320), (128, 512)], core_batch=1,
            core_warmup=1, core_repeats=3, core_limit_s=15,
            compile_shapes=[(800, 1280), (512, 2048), (640, 960)],
            compile_backend='inductor', compile_warmup=3, compile_repeats=10,
            compile_limit_s=150)

    @classmethod
    def smoke(cls) -> 'Settings':
        return cls(
            resolutions=[(64, 96)], batch=2,
            train_warmup=0, train_steps=1, train_limit_s=30,
            numerics_shape=(64, 64), numerics_batch=2, numerics_steps=2,
            numerics_limit_s=30,
            core_grids=[(8, 12)], core_batch=1,
            core_warmup=1, core_repeats=1, core_limit_s=30,
            compile_shapes=[(64, 96), (96, 64), (64, 128)],
            compile_backend='eager', compile_warmup=1, compile_repeats=2,
            compile_limit_s=60,
            # Tracing one backbone takes dynamo 10-30 s on 2 CPU cores:
            # the smoke run compiles one small family.
            compile_models=('FLatten-PVTv2-B0', ), kernel_steps=1,
            kernel_top=3, tuning_settings=2)


# ------------------------------------------------------- time and the device


class MeasurementTimeout(Exception):
    """A measurement ran past its time limit."""


@contextlib.contextmanager
def time_limit(seconds: Optional[float]) -> Iterator[None]:
    """Raise :class:`MeasurementTimeout` in the code inside after
    ``seconds`` (SIGALRM; a no-op off the main thread or without it)."""
    if (seconds is None or not hasattr(signal, 'setitimer')
            or threading.current_thread() is not threading.main_thread()):
        yield
        return

    def expire(signum, frame):
        raise MeasurementTimeout(f'over its {seconds:.0f} s time limit')

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class Budget:
    """The run's deadline, and each section's share of it.

    A section ends by the run's deadline less the shares of the sections
    after it, so each is sure of its share and can use what earlier ones
    left over.
    """

    def __init__(self, seconds: float, sections: Sequence[str],
                 shares: Dict[str, float]):
        self.seconds = seconds
        self.start = time.perf_counter()
        self.deadline = self.start + seconds
        self.sections = list(sections)
        total = sum(shares[s] for s in self.sections) or 1.
        self.shares = {s: shares[s] / total for s in self.sections}
        self.section_deadline = self.deadline

    def open(self, section: str) -> float:
        """Start ``section``: returns the seconds it may use."""
        later = self.sections[self.sections.index(section) + 1:]
        reserve = sum(self.shares[s] for s in later) * self.seconds
        self.section_deadline = self.deadline - reserve
        return self.left()

    def left(self) -> float:
        return self.section_deadline - time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start


def synchronize(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def release_memory(device: torch.device, collect: bool = False) -> None:
    """Hand cached blocks back to the device; ``collect`` first frees
    what only reference cycles hold (an exception's traceback does)."""
    if collect:
        gc.collect()
    if device.type == 'cuda':
        torch.cuda.empty_cache()


def reset_peak(device: torch.device) -> int:
    """Reset the peak-memory counter; returns the bytes allocated now."""
    if device.type != 'cuda':
        return 0
    synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device)


def peak_mib(device: torch.device, base: int = 0) -> Optional[float]:
    """Peak allocated since :func:`reset_peak`, less ``base``, in MiB (None
    off CUDA: CPU peaks of one process are not per measurement)."""
    if device.type != 'cuda':
        return None
    synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - base) / 2**20


PRECISIONS = {'fp32': None, 'bf16': torch.bfloat16, 'fp16': torch.float16}
#: The precisions the cost model projects (an autocast step: bf16's bytes,
#: fp16's the same); fp32 rows have no projection (about a second of CPU
#: each, out of the run's budget).
PROJECTED = ('bf16', 'fp16')


def autocast(device: torch.device, precision: str):
    dtype = PRECISIONS[precision]
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def describe_error(exc: BaseException) -> str:
    """One line: the exception's type and the start of its message."""
    message = ' '.join(str(exc).split())
    if len(message) > 300:
        message = message[:300] + '...'
    return f'{type(exc).__name__}: {message}'


def first(result):
    """An attention's output: today most return ``out`` and stateful ones
    ``(out, state)``; soon all return ``(out, state)``."""
    return result[0] if isinstance(result, (tuple, list)) else result


# ------------------------------------------------------------------- tables


def _fmt(value, digits: int = 2) -> str:
    if value is None or value == '':
        return ''
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f'{value:.{digits}f}'
    return str(value)


class Table:
    """Rows of one section, written to ``<out>/<name>.csv`` on every
    :meth:`add` (and :meth:`update`)."""

    def __init__(self, name: str, columns: Sequence[str], out_dir: str,
                 finalize: Optional[Callable[['Table'], None]] = None):
        self.name = name
        self.columns = list(columns)
        self.path = osp.join(out_dir, f'{name}.csv')
        self.rows: List[dict] = []
        self.finalize = finalize

    def add(self, **row) -> dict:
        unknown = set(row) - set(self.columns)
        if unknown:
            raise KeyError(f'{self.name}: unknown columns {sorted(unknown)}')
        self.rows.append(row)
        self.write()
        return row

    def write(self) -> None:
        if self.finalize is not None:
            self.finalize(self)
        tmp = self.path + '.tmp'
        with open(tmp, 'w', newline='') as f:
            writer = csv.DictWriter(f, self.columns)
            writer.writeheader()
            for row in self.rows:
                writer.writerow({k: _fmt(row.get(k), 6) if isinstance(
                    row.get(k), float) else row.get(k, '')
                    for k in self.columns})
        os.replace(tmp, self.path)


def markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ['| ' + ' | '.join(header) + ' |',
             '| ' + ' | '.join('---' for _ in header) + ' |']
    lines += ['| ' + ' | '.join(str(c) for c in row) + ' |' for row in rows]
    return '\n'.join(lines)


def bold(text: str) -> str:
    return f'**{text}**' if text else text


def ratio(value, reference) -> Optional[float]:
    if value in (None, '') or reference in (None, '') or not reference:
        return None
    return value / reference


# -------------------------------------------------------------- environment


def _run(cmd: Sequence[str]) -> Optional[str]:
    try:
        return subprocess.run(cmd, capture_output=True, text=True,
                              timeout=20).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _version(distribution: str) -> Optional[str]:
    """An installed distribution's version, read from its metadata (no
    import: ``import mmpretrain`` alone costs seconds)."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent is missing, or blocked
        return False


def environment(device: torch.device, args) -> dict:
    """What ran: device, driver, torch / CUDA / cuDNN / Triton and the
    OpenMMLab versions, and the settings that change the numbers."""
    env = dict(
        started=time.strftime('%Y-%m-%d %H:%M:%S %Z'),
        command=' '.join([osp.basename(sys.executable)] + sys.argv),
        python=platform.python_version(),
        platform=platform.platform(),
        cpu_count=os.cpu_count(),
        torch=torch.__version__,
        torch_cuda=torch.version.cuda,
        cudnn=(torch.backends.cudnn.version()
               if torch.backends.cudnn.is_available() else None),
        triton=_version('triton') or _version('pytorch-triton'),
        numpy=_version('numpy'),
        mmengine=_version('mmengine'),
        # MMCV_WITH_OPS=0 builds the distribution 'mmcv-lite'.
        mmcv=_version('mmcv-lite') or _version('mmcv'),
        mmdet=_version('mmdet'),
        mmseg=_version('mmsegmentation'),
        mmpretrain=_version('mmpretrain'),
        mmcv_compiled_ops=_has_module('mmcv._ext'),
        device=str(device),
        matmul_allow_tf32=torch.backends.cuda.matmul.allow_tf32,
        cudnn_allow_tf32=torch.backends.cudnn.allow_tf32,
        cudnn_benchmark=torch.backends.cudnn.benchmark,
        threads=torch.get_num_threads(),
        smoke=args.smoke,
        budget_s=args.budget_s,
    )
    if device.type == 'cuda':
        props = torch.cuda.get_device_properties(device)
        env.update(
            gpu=torch.cuda.get_device_name(device),
            capability='.'.join(map(str,
                                    torch.cuda.get_device_capability(device))),
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            gpu_count=torch.cuda.device_count())
        query = _run(['nvidia-smi', '--query-gpu=name,driver_version,'
                      'memory.total,clocks.max.sm,power.limit',
                      '--format=csv,noheader'])
        env['nvidia_smi_query'] = query
        if query:
            env['driver'] = query.split(',')[1].strip()
        env['nvidia_smi'] = _run(['nvidia-smi'])
    else:
        cpu = platform.processor() or platform.machine()
        with contextlib.suppress(OSError):
            with open('/proc/cpuinfo') as f:
                for line in f:
                    if line.startswith('model name'):
                        cpu = line.split(':', 1)[1].strip()
                        break
        env['cpu'] = cpu
    return env


class _Blocker(importlib.abc.MetaPathFinder):
    """Makes the modules named (and their submodules) fail to import."""

    def __init__(self, names: Sequence[str]):
        self.names = tuple(names)

    def find_spec(self, fullname, path=None, target=None):
        if any(fullname == n or fullname.startswith(n + '.')
               for n in self.names):
            raise ModuleNotFoundError(
                f'{fullname} is blocked (--simulate-no-mmcv-ops: the GPU '
                'machine has mmcv without compiled ops)', name=fullname)
        return None


def forbidden_modules() -> List[str]:
    """Which of :data:`FORBIDDEN_IMPORTS` are imported now."""
    return [n for n in FORBIDDEN_IMPORTS if n in sys.modules]


# ------------------------------------------------------------------- train


def scalar_loss(model: nn.Module, outs) -> torch.Tensor:
    """Sum of the outputs' means, plus the backbone's auxiliary losses
    (LaViT's diagonality-preserving loss, part of its training cost)."""
    if torch.is_tensor(outs):
        outs = (outs, )
    loss = sum(o.float().mean() for o in outs)
    pop = getattr(model, 'pop_aux_losses', None)
    if pop is not None:
        for value in pop().values():
            loss = loss + value.float()
    return loss


class Trainer:
    """Training steps of one model in one precision: AdamW, and for fp16
    ``torch.amp.GradScaler`` (dynamic loss scaling)."""

    def __init__(self, model: nn.Module, device: torch.device,
                 precision: str, lr: float):
        self.model = model
        self.device = device
        self.precision = precision
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr,
                                           weight_decay=0.05)
        self.scaler = torch.amp.GradScaler(
            device.type) if precision == 'fp16' else None

    def step(self, x: torch.Tensor,
             loss_fn: Optional[Callable] = None,
             track_skips: bool = False) -> Tuple[torch.Tensor, bool]:
        """One step; returns the loss (a tensor, not synchronised) and,
        with ``track_skips``, whether the scaler skipped the update (fp16:
        it lowers the scale then; reading the scale synchronises)."""
        with autocast(self.device, self.precision):
            outs = self.model(x)
            loss = (loss_fn or (lambda o: scalar_loss(self.model, o)))(outs)
        skipped = False
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            scale = self.scaler.get_scale() if track_skips else None
            self.scaler.step(self.optimizer)
            self.scaler.update()
            if scale is not None:
                skipped = self.scaler.get_scale() < scale
        else:
            loss.backward()
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach(), skipped


TRAIN_COLUMNS = ['model', 'role', 'baseline', 'type', 'arch', 'height',
                 'width', 'batch', 'precision', 'attn_backend', 'status',
                 'step_ms', 'images_per_s', 'peak_mib', 'speed_ratio',
                 'memory_ratio', 'scaler_skips', 'projected_ms',
                 'projected_speed_ratio', 'ratio_error',
                 'projected_peak_mib', 'parameters',
                 'saved_mib', 'note']


def _train_ratios(table: Table) -> None:
    index = {(r['model'], r['height'], r['width'], r['precision']): r
             for r in table.rows}
    for row in table.rows:
        base = index.get((row['baseline'], row['height'], row['width'],
                          row['precision'])) if row['baseline'] else None
        if base is None:
            continue
        row['projected_speed_ratio'] = ratio(base.get('projected_ms'),
                                             row.get('projected_ms'))
        if row['status'] != 'ok' or base['status'] != 'ok':
            continue
        row['speed_ratio'] = ratio(row['images_per_s'], base['images_per_s'])
        row['memory_ratio'] = ratio(row['peak_mib'], base['peak_mib'])
        row['ratio_error'] = projection_error(row['speed_ratio'],
                                              row['projected_speed_ratio'])


def projection_error(measured: Optional[float],
                     projected: Optional[float]) -> Optional[float]:
    """``measured / projected - 1`` (None unless both exist)."""
    if measured is None or not projected:
        return None
    return measured / projected - 1


def measure_train(model: nn.Module, device: torch.device, shape: Shape,
                  batch: int, precision: str, settings: Settings) -> dict:
    """Images/s and peak memory of training steps at ``shape``."""
    trainer = Trainer(model, device, precision, settings.lr)
    x = torch.randn(batch, 3, *shape, device=device)
    try:
        for _ in range(settings.train_warmup):
            trainer.step(x)
        # The peak reported is absolute: weights, gradients, AdamW state.
        reset_peak(device)
        scale = trainer.scaler.get_scale() if trainer.scaler else None
        start = time.perf_counter()
        for _ in range(settings.train_steps):
            loss, _ = trainer.step(x)
        synchronize(device)
        seconds = (time.perf_counter() - start) / settings.train_steps
        if not torch.isfinite(loss):
            raise FloatingPointError(f'loss {loss.item()}')
        result = dict(step_ms=seconds * 1e3, images_per_s=batch / seconds,
                      peak_mib=peak_mib(device))
        if scale is not None:
            # Each skipped step (inf/NaN gradients: no optimizer update,
            # a slightly cheaper step) halves the scale; none grows it
            # within 2000 steps.
            result['scaler_skips'] = round(
                math.log2(scale / trainer.scaler.get_scale()))
        return result
    finally:
        trainer.optimizer.zero_grad(set_to_none=True)
        del trainer


def train_order(resolutions: Sequence[Shape]) -> List[Tuple[Shape, str]]:
    """(size, precision) pairs in the order the train section measures
    them, every model at each before the next: bf16 at every size first
    (what users train in, and what the cost model projects), then fp16 and
    fp32; a budget that runs out leaves whole precisions, not whole
    families, unmeasured."""
    return [(shape, precision) for precision in ('bf16', 'fp16', 'fp32')
            for shape in resolutions]


def run_train(ctx: 'Context') -> Table:
    s = ctx.settings
    table = Table('train', TRAIN_COLUMNS, ctx.out, _train_ratios)
    eager_only: Dict[str, str] = {}  # families whose fused ops failed
    for shape, precision in train_order(s.resolutions):
        for spec in ctx.specs:
            row = dict(model=spec.label, role=spec.role,
                       baseline=spec.baseline or '', type=spec.type,
                       arch=ctx.arch(spec), batch=s.batch, height=shape[0],
                       width=shape[1], precision=precision)
            model, error = ctx.build(spec)
            if model is not None and spec.label in eager_only:
                set_backend(model, 'eager')
            result, status, note = ctx.attempt(
                error, 5, s.train_limit_s,
                lambda: measure_train(model, ctx.device, shape, s.batch,
                                      precision, s))
            backend = '' if model is None else resolved_backend(
                model, ctx.device)
            if status == 'error' and error is None and backend == 'triton':
                # A kernel that fails on this GPU costs the family its
                # fused rows, not its training rows: eager from here on.
                eager_only[spec.label] = note
                ctx.log(f'[train] {spec.label}: the fused ops failed '
                        f'({note}); eager from here on')
                model, _ = ctx.build(spec)
                set_backend(model, 'eager')
                backend = 'eager'
                result, status, note = ctx.attempt(
                    None, 5, s.train_limit_s,
                    lambda: measure_train(model, ctx.device, shape,
                                          s.batch, precision, s))
            if spec.label in eager_only:
                note = '; '.join(filter(None, [
                    f'the fused ops failed ({eager_only[spec.label]}); '
                    'eager', note]))
            # Projected as it ran: the fused ops where they did.
            projected = ctx.projection(
                spec, shape, precision,
                'triton' if backend == 'triton' else None)
            table.add(**row, **(result or {}), status=status, note=note,
                      attn_backend=backend,
                      projected_ms=projected and projected.ms,
                      **ctx.projected_memory(
                          spec, shape, precision,
                          'triton' if backend == 'triton' else None))
            ctx.log(f'[train] {spec.label} {shape[0]}x{shape[1]} '
                    f'{precision}: ' + (
                        f"{result['images_per_s']:.2f} img/s, "
                        f"{_fmt(result['peak_mib'], 0) or '-'} MiB"
                        if result else f'{status} ({note})'))
            model = None  # freed before the next one is built
            release_memory(ctx.device, collect=True)
    table.write()
    ctx.calibrate(table.rows)
    return table


def train_markdown(table: Table) -> str:
    base = {(r['model'], r['height'], r['width'], r['precision']): r
            for r in table.rows}
    rows = []
    for r in table.rows:
        if r['role'] != 'family':
            continue
        b = base.get((r['baseline'], r['height'], r['width'],
                      r['precision']), {})
        note = r['note']  # '' for a row that ran as asked
        if r.get('scaler_skips'):
            note = (f"{r['scaler_skips']} of the timed steps skipped by "
                    'the scaler')
        if b.get('status') not in (None, 'ok'):
            note = (note + '; ' if note else '') + (
                f"baseline {b['status']}: {b.get('note', '')}")
        rows.append([
            r['model'], r['baseline'], f"{r['height']}x{r['width']}",
            r['precision'], _fmt(r.get('images_per_s'), 1),
            _fmt(b.get('images_per_s'), 1),
            bold(_fmt(r.get('speed_ratio'))),
            _fmt(r.get('projected_speed_ratio')), _percent(
                r.get('ratio_error')), _fmt(r.get('peak_mib'), 0),
            _fmt(b.get('peak_mib'), 0), bold(_fmt(r.get('memory_ratio'))),
            _fmt(r.get('projected_peak_mib'), 0),
            _fmt(b.get('projected_peak_mib'), 0),
            r.get('attn_backend', ''), note])
    return markdown(['model', 'baseline', 'input', 'precision', 'img/s',
                     'baseline img/s', 'speed ratio', 'projected',
                     'error', 'peak MiB', 'baseline MiB', 'memory ratio',
                     'projected peak MiB', 'projected baseline MiB',
                     'attn_backend', 'note'], rows)


def _percent(value) -> str:
    return '' if value in (None, '') else f'{float(value) * 100:+.0f}%'


def headline_markdown(tables: Dict[str, 'Table']) -> str:
    """One row per family and input: its training-speed ratio to the
    baseline in each precision, its memory ratio, and whether 100 fp16 /
    bf16 steps stayed finite (the few lines a reader needs first)."""
    train = tables.get('train')
    numerics = {(r['model'], r['precision']): r
                for r in (tables['numerics'].rows if 'numerics' in tables
                          else [])}

    def stable(label):
        cells = []
        for precision in ('fp16', 'bf16'):
            r = numerics.get((label, precision))
            if r is None:
                continue
            if r['status'] != 'ok':
                cells.append(f"{precision} {r['status']}")
            else:
                skipped = (f", {r['skipped_steps']} skipped"
                           if r['skipped_steps'] not in ('', None) else '')
                finite = 'finite' if r['finite'] else 'NOT finite'
                cells.append(f'{precision} {finite}{skipped}')
        return '; '.join(cells)

    rows = []
    inputs = []
    if train is not None:
        inputs = list(dict.fromkeys((r['height'], r['width'])
                                    for r in train.rows))
    by_key = {(r['model'], r['height'], r['width'], r['precision']): r
              for r in (train.rows if train is not None else [])}
    for spec in FAMILIES:
        for h, w in inputs or [None]:
            cells = [spec.label, spec.baseline,
                     f'{h}x{w}' if h is not None else '']
            for precision in PRECISIONS:
                r = by_key.get((spec.label, h, w, precision), {})
                cells.append(bold(_fmt(r.get('speed_ratio'))) if r.get(
                    'speed_ratio') is not None else r.get('status', ''))
            for precision in ('fp32', 'bf16'):
                r = by_key.get((spec.label, h, w, precision), {})
                cells.append(bold(_fmt(r.get('memory_ratio'))))
            cells.append(stable(spec.label))
            rows.append(cells)
    return markdown(['family', 'baseline', 'input', 'speed fp32',
                     'speed bf16', 'speed fp16', 'memory fp32',
                     'memory bf16', 'numerics'], rows)


# --------------------------------------------------------------- backends

BACKEND_COLUMNS = ['model', 'type', 'arch', 'height', 'width', 'batch',
                   'precision', 'attn_backend', 'status', 'step_ms',
                   'images_per_s', 'peak_mib', 'speed_ratio', 'projected_ms',
                   'projected_speed_ratio', 'ratio_error',
                   'projected_peak_mib', 'parameters',
                   'saved_mib', 'note']


def _backend_ratios(table: Table) -> None:
    """Each fused row against its eager row."""
    eager = {(r['model'], r['height'], r['width']): r for r in table.rows
             if r['attn_backend'] == 'eager'}
    for row in table.rows:
        base = eager.get((row['model'], row['height'], row['width']))
        if row['attn_backend'] != 'triton' or base is None:
            continue
        row['projected_speed_ratio'] = ratio(base.get('projected_ms'),
                                             row.get('projected_ms'))
        if row['status'] == 'ok' and base['status'] == 'ok':
            row['speed_ratio'] = ratio(row['images_per_s'],
                                       base['images_per_s'])
            row['ratio_error'] = projection_error(
                row['speed_ratio'], row['projected_speed_ratio'])


def run_backends(ctx: 'Context') -> Table:
    """Every family with its eager attentions and with the fused ops."""
    s = ctx.settings
    table = Table('backends', BACKEND_COLUMNS, ctx.out, _backend_ratios)
    shape = s.resolutions[0]
    precision = 'bf16' if ctx.device.type == 'cuda' else 'fp32'
    for spec in ctx.families:
        model, error = ctx.build(spec)
        fallback = ''
        for backend in ('eager', 'triton'):
            if model is not None:
                set_backend(model, backend)
            result, status, note = ctx.attempt(
                error, 5, s.train_limit_s,
                lambda: measure_train(model, ctx.device, shape, s.batch,
                                      precision, s))
            if backend == 'triton' and status == 'error' and \
                    error is None:
                fallback = (f'the fused ops failed ({note}); the family '
                            'falls back to eager')
                note = fallback
            # The projection is of a GPU's bf16 step, whatever ran here.
            projected = ctx.projection(spec, shape, 'bf16', backend)
            table.add(model=spec.label, type=spec.type, arch=ctx.arch(spec),
                      height=shape[0], width=shape[1], batch=s.batch,
                      precision=precision, attn_backend=backend,
                      status=status, note=note,
                      projected_ms=projected and projected.ms,
                      **ctx.projected_memory(spec, shape, 'bf16', backend),
                      **(result or {}))
            ctx.log(f'[backends] {spec.label} {backend}: ' + (
                f"{result['step_ms']:.1f} ms" if result else
                f'{status} ({note})'))
        if fallback:
            ctx.log(f'[backends] {spec.label}: {fallback}')
        model = None
        release_memory(ctx.device, collect=True)
    return table


def backends_markdown(table: Table) -> str:
    rows = []
    eager = {(r['model'], r['height'], r['width']): r for r in table.rows
             if r['attn_backend'] == 'eager'}
    for r in table.rows:
        if r['attn_backend'] != 'triton':
            continue
        e = eager.get((r['model'], r['height'], r['width']), {})
        rows.append([
            r['model'], f"{r['height']}x{r['width']}", r['precision'],
            _fmt(e.get('step_ms'), 1), _fmt(r.get('step_ms'), 1),
            bold(_fmt(r.get('speed_ratio'))),
            _fmt(e.get('projected_ms'), 1), _fmt(r.get('projected_ms'), 1),
            _fmt(r.get('projected_speed_ratio')),
            _percent(r.get('ratio_error')), _fmt(e.get('peak_mib'), 0),
            _fmt(r.get('peak_mib'), 0), _fmt(e.get('projected_peak_mib'), 0),
            _fmt(r.get('projected_peak_mib'), 0),
            r['note'] if r['status'] != 'ok' else e.get('note', '')])
    return markdown(['family', 'input', 'precision', 'eager ms', 'fused ms',
                     'speed-up', 'projected eager ms', 'projected fused ms',
                     'projected speed-up', 'error', 'eager peak MiB',
                     'fused peak MiB', 'projected eager peak MiB',
                     'projected fused peak MiB', 'note'], rows)


# ----------------------------------------------------------------- kernels

KERNEL_COLUMNS = ['model', 'attn_backend', 'height', 'width', 'batch',
                  'precision', 'status', 'clock', 'rank', 'kernel',
                  'calls_per_step', 'ms_per_step', 'share', 'step_ms',
                  'projected_ms_per_step', 'of_roofline', 'note']


def _ranked(events: List[Tuple[str, int, float]], steps: int, top: int,
            clock: str, step_ms: float) -> List[dict]:
    """Rows of ``(name, count, us)`` events by time: the whole first
    ('all kernels' on the device, 'all ops' on the host, with the
    profiled step's wall ``step_ms``), then the ``top`` largest."""
    events = sorted((e for e in events if e[2] > 0), key=lambda e: -e[2])
    total = sum(us for _, _, us in events) or 1.
    rows = [dict(clock=clock, kernel='all kernels' if clock == 'device'
                 else 'all ops', calls_per_step=sum(
                     n for _, n, _ in events) / steps,
                 ms_per_step=total / steps / 1e3, share=1.,
                 step_ms=step_ms)]
    for name, count, us in events[:top]:
        rows.append(dict(clock=clock, kernel=name[:120],
                         calls_per_step=count / steps,
                         ms_per_step=us / steps / 1e3, share=us / total))
    return rows


def projected_kernel_ms(ops: Sequence['cost_model.OpRecord'],
                        hardware: 'cost_model.Hardware'
                        ) -> Dict[str, float]:
    """The cost model's ms per step of a recorded step's kernels: the
    whole under 'all kernels', and each Triton kernel of a step recorded
    as launched (``<op>/<kernel>``) under its own name, the one the
    profiler gives it, summed over the ops that launch it. A fused op's
    FLOPs are on its first launch (:meth:`StepRecorder.launch`): the
    kernels after it are projected by their bytes."""
    projected: Dict[str, float] = defaultdict(float)
    for r in ops:
        # As cost_model.project times it (a custom op's kernels at the
        # preset's fused efficiency).
        ms = hardware.kernel_us(r.flops, r.nbytes,
                                cost_model.is_fused(r.name)) / 1e3
        projected['all kernels'] += ms
        if '/' in r.name:
            projected[r.name.rsplit('/', 1)[1]] += ms
    return dict(projected)


def with_projection(rows: List[dict],
                    projected: Dict[str, float]) -> List[dict]:
    """``rows`` of the device clock given what the cost model projects
    for them (:func:`projected_kernel_ms`): ``projected_ms_per_step`` and
    ``of_roofline``, projected over measured, the share of the roofline a
    kernel reaches (the whole step's on its 'all kernels' row, whose
    measured step also runs the optimizer; an aten kernel, whose name is
    not its op's, has none). A Triton kernel is matched by its name, or
    by the longest kernel name the profiler's contains (a decorated
    one)."""
    for row in rows:
        if row.get('clock') != 'device':
            continue
        name = row['kernel']
        ms = projected.get(name)
        if ms is None:
            inside = [k for k in projected
                      if k != 'all kernels' and k in name]
            ms = projected[max(inside, key=len)] if inside else None
        if ms is not None:
            row.update(projected_ms_per_step=ms,
                       of_roofline=ratio(ms, row['ms_per_step']))
    return rows


def top_kernels(model: nn.Module, device: torch.device, shape: Shape,
                batch: int, precision: str, steps: int,
                top: int) -> List[dict]:
    """Where a training step's time goes (``torch.profiler``): on a GPU
    the ``top`` kernels by the device's own time ('device' rows), and on
    every device the ``top`` ops by their host time, children excluded
    ('host' rows: a custom op's own Python and its kernels' launches,
    which no aten op below it accounts for). Each clock's rows start with
    its whole, beside the profiled step's wall time: device kernels far
    below it leave the step bound by the host. Columns: ``clock``,
    ``kernel``, ``calls_per_step``, ``ms_per_step``, ``share`` of the
    clock's whole, ``step_ms``."""
    from torch.profiler import ProfilerActivity, profile
    trainer = Trainer(model, device, precision, 1e-4)
    x = torch.randn(batch, 3, *shape, device=device)
    activities = [ProfilerActivity.CPU]
    if device.type == 'cuda':
        activities.append(ProfilerActivity.CUDA)
    try:
        for _ in range(2):  # compilation and the allocator's warm-up
            trainer.step(x)
        synchronize(device)
        with profile(activities=activities) as prof:
            start = time.perf_counter()
            for _ in range(steps):
                trainer.step(x)
            synchronize(device)
            step_ms = (time.perf_counter() - start) / steps * 1e3
    finally:
        trainer.optimizer.zero_grad(set_to_none=True)
        del trainer
    kernels, host = [], []
    for event in prof.key_averages():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            kernels.append((event.key, event.count, getattr(
                event, 'self_device_time_total',
                getattr(event, 'self_cuda_time_total', 0))))
        else:
            # Host time only: an op's device time is its kernels', which
            # the device rows count.
            host.append((event.key, event.count, event.self_cpu_time_total))
    rows = _ranked(kernels, steps, top, 'device', step_ms) \
        if device.type == 'cuda' else []
    return rows + _ranked(host, steps, top, 'host', step_ms)


def run_kernels(ctx: 'Context') -> Table:
    """Each family's training step, eager and fused, kernel by kernel:
    where the device's time goes (what to tune)."""
    s = ctx.settings
    table = Table('kernels', KERNEL_COLUMNS, ctx.out)
    shape = s.resolutions[0]
    precision = 'bf16' if ctx.device.type == 'cuda' else 'fp32'
    for spec in ctx.families:
        model, error = ctx.build(spec)
        for backend in ('eager', 'triton'):
            if model is not None:
                set_backend(model, backend)
            result, status, note = ctx.attempt(
                error, 5, s.train_limit_s,
                lambda: dict(rows=with_projection(top_kernels(
                    model, ctx.device, shape, s.batch, precision,
                    s.kernel_steps, s.kernel_top),
                    ctx.projected_kernels(spec, shape, backend))))
            common = dict(model=spec.label, attn_backend=backend,
                          height=shape[0], width=shape[1], batch=s.batch,
                          precision=precision, status=status, note=note)
            rows = (result or {}).get('rows') or [{}]
            ranks: Dict[Optional[str], int] = {}
            for row in rows:  # ranked within a clock, 0 its whole
                rank = ranks[row.get('clock')] = ranks.get(
                    row.get('clock'), -1) + 1
                table.add(rank=rank, **common, **row)
            wholes = [r for r in rows if 'step_ms' in r]
            ctx.log(f'[kernels] {spec.label} {backend}: ' + (
                ', '.join(f"{r['ms_per_step']:.1f} ms {r['clock']}"
                          for r in wholes)
                + f" of a {wholes[0]['step_ms']:.1f} ms step"
                if result else f'{status} ({note})'))
        model = None
        release_memory(ctx.device, collect=True)
    return table


def kernels_markdown(table: Table) -> str:
    rows = [[r['model'], r['attn_backend'], r.get('clock') or '',
             str(r['rank']), r['kernel'] or r['note'],
             _fmt(r.get('calls_per_step'), 1), _fmt(r.get('ms_per_step')),
             _percent(r.get('share')), _fmt(r.get('step_ms'), 1),
             _fmt(r.get('projected_ms_per_step')),
             _percent(r.get('of_roofline'))]
            for r in table.rows]
    return markdown(['family', 'backend', 'clock', 'rank', 'kernel',
                     'calls / step', 'ms / step', 'share',
                     'profiled step ms', 'projected ms', 'of roofline'],
                    rows)


# ------------------------------------------------------------------ tuning

#: The launch settings the tuning section tries for each kernel module
#: (module attributes its op reads at every launch); the first is the
#: module's own.
TUNING_GRID = {
    # The module's own (no spills but a 64-wide head's query backward, 64
    # B), then the setting it had before (32 tokens, 4 warps: what its
    # spills cost only a GPU says), 16 warps (fewer registers a thread),
    # then the fp32 features' products on tensor cores ('tf32x3', fp32's
    # precision; 'ieee' runs them on CUDA cores).
    'triton_linear_attention': [
        dict(BLOCK_N=16, NUM_WARPS=8, DOT_PRECISION='ieee'),
        dict(BLOCK_N=32, NUM_WARPS=4, DOT_PRECISION='ieee'),
        dict(BLOCK_N=16, NUM_WARPS=16, DOT_PRECISION='ieee'),
        dict(BLOCK_N=16, NUM_WARPS=8, DOT_PRECISION='tf32x3'),
        dict(BLOCK_N=32, NUM_WARPS=8, DOT_PRECISION='ieee'),
        dict(BLOCK_N=32, NUM_WARPS=8, DOT_PRECISION='tf32x3'),
        dict(BLOCK_N=16, NUM_WARPS=4, DOT_PRECISION='ieee'),
        dict(BLOCK_N=64, NUM_WARPS=8, DOT_PRECISION='tf32x3')],
    # The flash-style kernels: their own (8 warps since 0.5.12, no spill
    # in bf16), the 4 they had, then smaller tiles (128-token tiles need
    # more shared memory than sm_90 has, with a mask, or spill 0.8-1 KB).
    'triton_mean_shift_attention': [
        dict(BLOCK=64, NUM_WARPS=8), dict(BLOCK=64, NUM_WARPS=4),
        dict(BLOCK=32, NUM_WARPS=4), dict(BLOCK=32, NUM_WARPS=2)],
    'triton_softmax_apply': [
        dict(BLOCK=64, NUM_WARPS=8), dict(BLOCK=64, NUM_WARPS=4),
        dict(BLOCK=32, NUM_WARPS=4), dict(BLOCK=32, NUM_WARPS=2)],
    # The score convs: their own (8 warps since 0.5.13: the mixed
    # query pass's transpose spills on 4 in bf16), the 4 they had.
    'triton_score_conv': [
        dict(BLOCK_Q=16, BLOCK_K=64, NUM_WARPS=8),
        dict(BLOCK_Q=16, BLOCK_K=64, NUM_WARPS=4),
        dict(BLOCK_Q=8, BLOCK_K=64, NUM_WARPS=2),
        dict(BLOCK_Q=16, BLOCK_K=128, NUM_WARPS=4),
        dict(BLOCK_Q=32, BLOCK_K=64, NUM_WARPS=4),
        dict(BLOCK_Q=32, BLOCK_K=128, NUM_WARPS=8)],
}

_LINEAR = ('triton_linear_attention', )
#: The kernel modules each family's fused ops launch.
FUSED_MODULES = {
    'FLatten-Swin-T': _LINEAR, 'L2ViT-T': _LINEAR, 'FLatten-PVT-T': _LINEAR,
    'FLatten-PVTv2-B0': _LINEAR, 'FLatten-CSwin-T': _LINEAR,
    'MSF-Swin-T': ('triton_mean_shift_attention', ),
    'LaViT-S': ('triton_score_conv', 'triton_softmax_apply'),
}

TUNING_COLUMNS = ['model', 'module', 'setting', 'height', 'width', 'batch',
                  'precision', 'status', 'step_ms', 'speed_ratio', 'note']


def launch_settings(module: str, **values):
    """:func:`vitattn_mm.ops.backend.launch_settings` (imported when used,
    as every import of the package here: its failure is a row)."""
    from vitattn_mm.ops.backend import launch_settings as settings
    return settings(module, **values)


def setting_label(values: dict) -> str:
    return ' '.join(f'{k}={v}' for k, v in values.items())


def run_tuning(ctx: 'Context') -> Table:
    """Each family's fused training step with every launch setting of
    :data:`TUNING_GRID` for the kernel modules it uses, one module at a
    time (the others at their own); speed ratio = the module's own
    setting's step ms / this one's."""
    s = ctx.settings
    table = Table('tuning', TUNING_COLUMNS, ctx.out)
    shape = s.resolutions[0]
    precision = 'bf16' if ctx.device.type == 'cuda' else 'fp32'
    for spec in ctx.families:
        modules = FUSED_MODULES.get(spec.label, ())
        model, error = ctx.build(spec) if modules else (None, None)
        if model is not None:
            set_backend(model, 'triton')
        for module in modules:
            grid = TUNING_GRID[module][:s.tuning_settings]
            own_ms = None
            for values in grid:
                def step(values=values):
                    with launch_settings(module, **values):
                        return measure_train(model, ctx.device, shape,
                                             s.batch, precision, s)
                result, status, note = ctx.attempt(error, 5,
                                                   s.train_limit_s, step)
                ms = result and result['step_ms']
                if values is grid[0]:
                    own_ms = ms
                table.add(model=spec.label, module=module,
                          setting=setting_label(values), height=shape[0],
                          width=shape[1], batch=s.batch,
                          precision=precision, status=status, note=note,
                          step_ms=ms, speed_ratio=ratio(own_ms, ms))
                ctx.log(f'[tuning] {spec.label} {module} '
                        f'{setting_label(values)}: ' + (
                            f'{ms:.1f} ms' if ms else f'{status} ({note})'))
        model = None
        release_memory(ctx.device, collect=True)
    return table


def best_settings(table: Table) -> List[dict]:
    """Per family and kernel module, its fastest measured setting (the
    row), where one was measured."""
    best: Dict[Tuple[str, str], dict] = {}
    for r in table.rows:
        if r['status'] != 'ok' or not r.get('step_ms'):
            continue
        key = (r['model'], r['module'])
        if key not in best or r['step_ms'] < best[key]['step_ms']:
            best[key] = r
    return list(best.values())


def tuning_markdown(table: Table) -> str:
    rows = [[r['model'], r['module'], r['setting'], _fmt(r.get('step_ms'), 1),
             bold(_fmt(r.get('speed_ratio'))),
             r['note'] if r['status'] != 'ok' else '']
            for r in table.rows]
    lines = [markdown(['family', 'kernels', 'setting', 'step ms',
                       'speed vs own', 'note'], rows), '']
    lines += [f"Best for {r['model']} / {r['module']}: {r['setting']} "
              f"({_fmt(r.get('speed_ratio'))}x its own setting)"
              for r in best_settings(table)]
    return '\n'.join(lines)


# ---------------------------------------------------------------- numerics

NUMERICS_COLUMNS = ['model', 'role', 'type', 'arch', 'height', 'width',
                    'batch', 'precision', 'status', 'steps', 'steps_run',
                    'finite', 'nonfinite_losses', 'skipped_steps',
                    'final_scale', 'first_loss', 'last_loss', 'min_loss',
                    'seconds', 'note']


def measure_numerics(model: nn.Module, device: torch.device,
                     precision: str, settings: Settings,
                     seed: int) -> dict:
    """``numerics_steps`` training steps on a fixed random batch towards a
    fixed random target (MSE of the outputs' spatial means)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(settings.numerics_batch, 3, *settings.numerics_shape,
                    generator=generator).to(device)
    target = {}

    def mse(outs):
        outs = (outs, ) if torch.is_tensor(outs) else outs
        means = torch.cat([o.float().mean(dim=(2, 3)) for o in outs], dim=1)
        if 'y' not in target:
            target['y'] = 0.5 * torch.randn(
                means.shape, generator=generator).to(device)
        loss = F.mse_loss(means, target['y'])
        pop = getattr(model, 'pop_aux_losses', None)
        for value in (pop() if pop is not None else {}).values():
            loss = loss + value.float()
        return loss

    trainer = Trainer(model, device, precision, settings.lr)
    losses, skipped = [], 0
    start = time.perf_counter()
    try:
        for _ in range(settings.numerics_steps):
            loss, was_skipped = trainer.step(x, mse, track_skips=True)
            losses.append(loss)
            skipped += int(was_skipped)
        synchronize(device)
    finally:
        trainer.optimizer.zero_grad(set_to_none=True)
    values = [float(v) for v in torch.stack(losses).cpu()]
    finite = [v for v in values if math.isfinite(v)]
    return dict(
        steps_run=len(values), finite=len(finite) == len(values),
        nonfinite_losses=len(values) - len(finite), skipped_steps=(
            skipped if trainer.scaler is not None else ''),
        final_scale=(trainer.scaler.get_scale()
                     if trainer.scaler is not None else ''),
        first_loss=values[0], last_loss=values[-1],
        min_loss=min(finite) if finite else float('nan'),
        seconds=time.perf_counter() - start)


def run_numerics(ctx: 'Context') -> Table:
    s = ctx.settings
    table = Table('numerics', NUMERICS_COLUMNS, ctx.out)
    for number, spec in enumerate(ctx.families + ctx.baselines):
        for precision in ('fp16', 'bf16'):
            model, error = ctx.build(spec)  # the same initial weights
            if model is not None:
                model.train()
            result, status, note = ctx.attempt(
                error, 5, s.numerics_limit_s,
                lambda: measure_numerics(model, ctx.device, precision, s,
                                         seed=number))
            table.add(model=spec.label, role=spec.role, type=spec.type,
                      arch=ctx.arch(spec), height=s.numerics_shape[0],
                      width=s.numerics_shape[1], batch=s.numerics_batch,
                      precision=precision, steps=s.numerics_steps,
                      **(result or {}), status=status, note=note)
            ctx.log(f'[numerics] {spec.label} {precision}: ' + (
                f"loss {result['first_loss']:.4g} -> "
                f"{result['last_loss']:.4g}, finite {result['finite']}, "
                f"skipped {result['skipped_steps'] or '-'}"
                if result else f'{status} ({note})'))
            model = None
            release_memory(ctx.device)
    return table


def numerics_markdown(table: Table) -> str:
    rows = [[
        r['model'], r['role'], r['precision'],
        f"{r.get('steps_run', '')}/{r['steps']}", r.get('finite', ''),
        r.get('skipped_steps', ''), _fmt(r.get('final_scale'), 0),
        _fmt(r.get('first_loss'), 4), _fmt(r.get('last_loss'), 4),
        r['note'] if r['status'] != 'ok' else ''
    ] for r in table.rows]
    return markdown(['model', 'role', 'precision', 'steps', 'loss finite',
                     'skipped steps', 'final scale', 'first loss',
                     'last loss', 'note'], rows)


# -------------------------------------------------------------------- core


@dataclass(frozen=True)
class CoreSpec:
    """An attention module of the ``core`` section.

    Args:
        label (str): Name in the tables.
        family (str): The family (or baseline) it belongs to.
        embed_dims (int): Channels (the family's stage-1 width).
        num_heads (int): Heads in stage 1.
        layers (tuple[tuple[str, dict]]): Registered attention names and
            their constructor arguments, run one after the other, each
            given the state the one before returned (a VA layer feeding an
            LA layer).
    """
    label: str
    family: str
    embed_dims: int
    num_heads: int
    layers: Tuple[Tuple[str, dict], ...]


CORE_SPECS: List[CoreSpec] = [
    CoreSpec('WindowMSA (shifted 7x7 windows)', 'Swin-T', 96, 3,
             (('WindowedAttention', dict(window_msa='WindowMSA',
                                         window_size=7, shift=True)), )),
    CoreSpec('FocusedLinearAttention', 'FLatten-Swin-T', 96, 3,
             (('FocusedLinearAttention', dict(grid_size=(56, 56))), )),
    CoreSpec('LinearGlobalAttention', 'L2ViT-T', 96, 3,
             (('LinearGlobalAttention', {}), )),
    CoreSpec('MeanShiftAttention (shifted 7x7 windows)', 'MSF-Swin-T', 96, 3,
             (('WindowedAttention', dict(window_msa='MeanShiftAttention',
                                         window_size=7, shift=True)), )),
    CoreSpec('MeanShiftAttention (global)', 'MSF', 96, 3,
             (('MeanShiftAttention', {}), )),
    CoreSpec('SpatialReductionAttention (sr 8)', 'PVT-T/S', 64, 1,
             (('SpatialReductionAttention', dict(sr_ratio=8)), )),
    CoreSpec('FocusedLinearAttention', 'FLatten-PVT-T', 64, 1,
             (('FocusedLinearAttention', dict(grid_size=(56, 56))), )),
    CoreSpec('VanillaAttention + LessAttention (sr 8)', 'LaViT-S', 64, 1,
             (('VanillaAttention', dict(sr_ratio=8, keep_logits=True)),
              ('LessAttention', dict(sr_ratio=8)))),
    CoreSpec('CrossShapedWindowAttention (split 1)', 'CSwin-T', 64, 2,
             (('CrossShapedWindowAttention', dict(split_size=1)), )),
    CoreSpec('FocusedLinearAttention (LePE)', 'FLatten-CSwin-T', 64, 2,
             (('FocusedLinearAttention', dict(grid_size=(56, 56),
                                              lepe=True)), )),
]

CORE_COLUMNS = ['attention', 'family', 'grid', 'tokens', 'batch',
                'embed_dims', 'heads', 'precision', 'status', 'fwd_bwd_ms',
                'peak_mib', 'sdpa_ms', 'sdpa_peak_mib', 'time_ratio',
                'memory_ratio', 'note']


def build_attention_layers(spec: CoreSpec) -> nn.ModuleList:
    """``spec``'s attention(s), built from ``ATTENTIONS`` by name."""
    from vitattn_mm.registry import ATTENTIONS
    layers = nn.ModuleList()
    for name, kwargs in spec.layers:
        cls = ATTENTIONS.get(name)
        if cls is None:
            raise KeyError(f'attention {name!r} is not registered')
        layers.append(cls(embed_dims=spec.embed_dims,
                          num_heads=spec.num_heads, **kwargs))
    return layers


def run_attention(layers: nn.ModuleList, x: torch.Tensor,
                  grid: Shape) -> torch.Tensor:
    """The layers one after the other; stateful ones get the state the
    previous one returned."""
    state = None
    for layer in layers:
        result = layer(x, grid) if state is None else layer(x, grid, state)
        x = first(result)
        if isinstance(result, (tuple, list)) and len(result) > 1:
            state = result[1]
    return x


def time_fwd_bwd(fn: Callable[[], torch.Tensor], device: torch.device,
                 warmup: int, repeats: int) -> Tuple[float, Optional[float]]:
    """Median seconds of ``fn().backward()`` and its peak MiB above what
    was allocated before it."""
    for _ in range(warmup):
        fn().backward()
    base = reset_peak(device)
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        fn().backward()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times), peak_mib(device, base)


def measure_core(spec: CoreSpec, grid: Shape, precision: str,
                 ctx: 'Context', backend: Optional[str] = None) -> dict:
    s, device = ctx.settings, ctx.device
    layers = build_attention_layers(spec).to(device).train()
    if backend is not None:
        set_backend(layers, backend)
    x = torch.randn(s.core_batch, grid[0] * grid[1], spec.embed_dims,
                    device=device, requires_grad=True)

    def step():
        with autocast(device, precision):
            out = run_attention(layers, x, grid)
        x.grad = None
        return out.float().mean()

    seconds, peak = time_fwd_bwd(step, device, s.core_warmup,
                                 s.core_repeats)
    return dict(fwd_bwd_ms=seconds * 1e3, peak_mib=peak)


def measure_sdpa(tokens: int, embed_dims: int, heads: int, precision: str,
                 ctx: 'Context') -> dict:
    """Fused softmax attention (``F.scaled_dot_product_attention``) over
    ``tokens`` keys and queries, no projections."""
    s, device = ctx.settings, ctx.device
    q, k, v = (torch.randn(s.core_batch, heads, tokens, embed_dims // heads,
                           device=device, requires_grad=True)
               for _ in range(3))

    def step():
        with autocast(device, precision):
            out = F.scaled_dot_product_attention(q, k, v)
        return out.float().mean()

    seconds, peak = time_fwd_bwd(step, device, s.core_warmup, s.core_repeats)
    return dict(sdpa_ms=seconds * 1e3, sdpa_peak_mib=peak)


def run_core(ctx: 'Context') -> Table:
    s = ctx.settings
    table = Table('core', CORE_COLUMNS, ctx.out)
    sdpa: Dict[tuple, Tuple[dict, str, str]] = {}
    # The modules with a fused op (attn_backend='triton').
    fused = {spec.label for spec in CORE_SPECS
             if backend_modules(build_attention_layers(spec))}
    for grid in s.core_grids:
        tokens = grid[0] * grid[1]
        for precision in ('fp32', 'bf16'):
            for spec in CORE_SPECS:
                key = (tokens, spec.embed_dims, spec.num_heads, precision)
                if key not in sdpa:
                    sdpa[key] = ctx.attempt(
                        None, 2, s.core_limit_s,
                        lambda: measure_sdpa(tokens, spec.embed_dims,
                                             spec.num_heads, precision, ctx))
                    ref, status, note = sdpa[key]
                    table.add(attention='SDPA (fused softmax, no projections)',
                              family='reference', grid=f'{grid[0]}x{grid[1]}',
                              tokens=tokens, batch=s.core_batch,
                              embed_dims=spec.embed_dims,
                              heads=spec.num_heads, precision=precision,
                              status=status, note=note,
                              fwd_bwd_ms=(ref or {}).get('sdpa_ms'),
                              peak_mib=(ref or {}).get('sdpa_peak_mib'))
                ref = sdpa[key][0] or {}
                result, status, note = ctx.attempt(
                    None, 2, s.core_limit_s,
                    lambda: measure_core(spec, grid, precision, ctx))
                row = dict(attention=spec.label, family=spec.family,
                           grid=f'{grid[0]}x{grid[1]}', tokens=tokens,
                           batch=s.core_batch, embed_dims=spec.embed_dims,
                           heads=spec.num_heads, precision=precision,
                           status=status, note=note, **ref, **(result or {}))
                if result:
                    row['time_ratio'] = ratio(result['fwd_bwd_ms'],
                                              ref.get('sdpa_ms'))
                    row['memory_ratio'] = ratio(result['peak_mib'],
                                                ref.get('sdpa_peak_mib'))
                table.add(**row)
                ctx.log(f'[core] {spec.label} {grid[0]}x{grid[1]} '
                        f'{precision}: ' + (
                            f"{result['fwd_bwd_ms']:.2f} ms vs SDPA "
                            f"{_fmt(ref.get('sdpa_ms'))} ms"
                            if result else f'{status} ({note})'))
                release_memory(ctx.device)
                if precision == 'bf16' and spec.label in fused:
                    # The same module on its eager composition: which
                    # kernel earns its place, one by one.
                    eager, status, note = ctx.attempt(
                        None, 2, s.core_limit_s,
                        lambda: measure_core(spec, grid, precision, ctx,
                                             backend='eager'))
                    table.add(**dict(
                        row, attention=f'{spec.label} [eager]',
                        status=status, note=note, **(eager or {}),
                        time_ratio=eager and ratio(
                            eager['fwd_bwd_ms'], ref.get('sdpa_ms')),
                        memory_ratio=eager and ratio(
                            eager['peak_mib'], ref.get('sdpa_peak_mib'))))
                    release_memory(ctx.device)
    return table


def core_markdown(table: Table) -> str:
    rows = [[
        r['attention'], r['family'], f"{r['grid']} ({r['tokens']})",
        f"{r['embed_dims']}/{r['heads']}", r['precision'],
        _fmt(r.get('fwd_bwd_ms')), _fmt(r.get('sdpa_ms')),
        bold(_fmt(r.get('time_ratio'))), _fmt(r.get('peak_mib'), 0),
        _fmt(r.get('sdpa_peak_mib'), 0), bold(_fmt(r.get('memory_ratio'))),
        r['note'] if r['status'] != 'ok' else ''
    ] for r in table.rows if r['family'] != 'reference']
    return markdown(['attention', 'family', 'grid (tokens)', 'C/heads',
                     'precision', 'fwd+bwd ms', 'SDPA ms', 'time ratio',
                     'peak MiB', 'SDPA MiB', 'memory ratio', 'note'], rows)


# ----------------------------------------------------------------- compile

COMPILE_COLUMNS = ['model', 'role', 'type', 'arch', 'height', 'width',
                   'batch', 'backend', 'status', 'eager_ms', 'compiled_ms',
                   'speedup', 'compile_s', 'graphs', 'graph_breaks',
                   'recompiled_graphs', 'sizes', 'note']


@contextlib.contextmanager
def dynamo_recompile_log() -> Iterator[List[str]]:
    """Collect dynamo's recompile messages (the guard that failed)."""
    messages: List[str] = []

    class Collect(logging.Handler):

        def emit(self, record):
            messages.append(' '.join(record.getMessage().split())[:200])

    logger = logging.getLogger('torch._dynamo.guards.__recompiles')
    handler = Collect()
    try:
        torch._logging.set_logs(recompiles=True)
    except Exception:  # logging API changed: the graph count still says it
        pass
    logger.addHandler(handler)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        with contextlib.suppress(Exception):
            torch._logging.set_logs(recompiles=False)


def median_latency(model: Callable, x: torch.Tensor, device: torch.device,
                   warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        model(x)
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        model(x)
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure_compile(model: nn.Module, ctx: 'Context') -> dict:
    """Eager vs compiled latency at the first size; graphs and graph
    breaks of the first compilation; graphs compiled anew for the other
    sizes (0: one dynamic graph serves them all)."""
    from torch._dynamo.utils import counters
    s, device = ctx.settings, ctx.device
    model.eval()
    inputs = [torch.randn(1, 3, *shape, device=device)
              for shape in s.compile_shapes]
    with torch.no_grad():
        eager = median_latency(model, inputs[0], device, s.compile_warmup,
                               s.compile_repeats)
        torch._dynamo.reset()
        counters.clear()
        compiled = torch.compile(model, backend=s.compile_backend,
                                 dynamic=True)
        with dynamo_recompile_log() as recompiles:
            start = time.perf_counter()
            compiled(inputs[0])
            synchronize(device)
            compile_s = time.perf_counter() - start
            graphs = counters['stats']['unique_graphs']
            breaks = dict(counters['graph_break'])
            for x in inputs[1:]:
                compiled(x)
            synchronize(device)
            again = counters['stats']['unique_graphs'] - graphs
        latency = median_latency(compiled, inputs[0], device,
                                 s.compile_warmup, s.compile_repeats)
    notes = [f'break: {reason[:120]} (x{n})' for reason, n in breaks.items()]
    notes += [f'recompile: {m}' for m in recompiles[:3]]
    return dict(eager_ms=eager * 1e3, compiled_ms=latency * 1e3,
                speedup=eager / latency, compile_s=compile_s, graphs=graphs,
                graph_breaks=sum(breaks.values()), recompiled_graphs=again,
                note='; '.join(notes))


def run_compile(ctx: 'Context') -> Table:
    s = ctx.settings
    table = Table('compile', COMPILE_COLUMNS, ctx.out)
    order = [SPECS[n] for n in (
        'FLatten-Swin-T', 'Swin-T', 'FLatten-PVT-T', 'PVT-T', 'L2ViT-T',
        'MSF-Swin-T', 'LaViT-S', 'PVT-S', 'FLatten-PVTv2-B0', 'PVTv2-B0',
        'FLatten-CSwin-T', 'CSwin-T')]
    for spec in order:
        if s.compile_models is not None and \
                spec.label not in s.compile_models:
            model, error = None, None
            result, status, note = None, 'skipped', (
                'this run compiles ' + ', '.join(s.compile_models) + ' only')
        else:
            model, error = (None, None) if ctx.budget.left() < 20 else \
                ctx.build(spec)
            result, status, note = ctx.attempt(
                error, 20, s.compile_limit_s,
                lambda: measure_compile(model, ctx))
        row = dict(model=spec.label, role=spec.role, type=spec.type,
                   arch=ctx.arch(spec), height=s.compile_shapes[0][0],
                   width=s.compile_shapes[0][1], batch=1,
                   backend=s.compile_backend, status=status,
                   sizes=' '.join(f'{h}x{w}' for h, w in s.compile_shapes),
                   **(result or {}))
        if status != 'ok':
            row['note'] = note
        table.add(**row)
        ctx.log(f'[compile] {spec.label}: ' + (
            f"eager {result['eager_ms']:.1f} ms, compiled "
            f"{result['compiled_ms']:.1f} ms, {result['graphs']} graph(s), "
            f"{result['graph_breaks']} break(s), "
            f"{result['recompiled_graphs']} recompiled, "
            f"compile {result['compile_s']:.1f} s"
            if result else f'{status} ({note})'))
        model = None
        with contextlib.suppress(Exception):
            torch._dynamo.reset()
        release_memory(ctx.device, collect=True)
    return table


def compile_markdown(table: Table) -> str:
    rows = [[
        r['model'], r['role'], r['backend'], _fmt(r.get('eager_ms'), 1),
        _fmt(r.get('compiled_ms'), 1), bold(_fmt(r.get('speedup'))),
        _fmt(r.get('compile_s'), 1), r.get('graphs', ''),
        r.get('graph_breaks', ''), r.get('recompiled_graphs', ''),
        r.get('note', '')
    ] for r in table.rows]
    return markdown(['model', 'role', 'backend', 'eager ms', 'compiled ms',
                     'speed-up', 'compile s', 'graphs', 'graph breaks',
                     'recompiled graphs', 'note'], rows)


# ------------------------------------------------------------------ running


class Context:
    """What every section needs: device, settings, budget, output folder,
    and the models (each built once, on the CPU; sections get copies)."""

    def __init__(self, device: torch.device, settings: Settings,
                 budget: Budget, out: str, smoke: bool,
                 specs: Sequence[ModelSpec] = tuple(MODEL_SPECS)):
        self.device = device
        #: The models of this run (``--models``), in the suite's order.
        self.specs = list(specs)
        self.families = [s for s in self.specs if s.role == 'family']
        self.baselines = [s for s in self.specs if s.role == 'baseline']
        self.settings = settings
        self.budget = budget
        self.out = out
        self.smoke = smoke
        self._models: Dict[str, Tuple[Optional[nn.Module], Optional[str]]] = {}
        self._steps: Dict[tuple, Optional[list]] = {}
        #: (parameters, saved bytes) of each recorded step, by the same key.
        self._memory: Dict[tuple, Tuple[int, int]] = {}
        #: Fused steps recorded as launched, by the same key (kept only).
        self._launched: Dict[tuple, list] = {}
        self.hardware = cost_model.Hardware()
        #: What the run's calibration found (:meth:`calibrate`).
        self.calibration: Optional[str] = None

    def log(self, line: str) -> None:
        print(line, flush=True)

    def arch(self, spec: ModelSpec) -> str:
        """The arch a row was measured with."""
        return 'smoke' if self.smoke else spec.arch

    def build(self, spec: ModelSpec):
        """(a fresh copy of ``spec``'s model on the device, None) or
        (None, error message). Every copy starts from the same weights."""
        if spec.label not in self._models:
            error = check_arch(spec)
            model = None
            if error is None:
                try:
                    torch.manual_seed(0)
                    model = build_model(spec, self.smoke)
                except Exception as exc:  # recorded in the rows; go on
                    error = f'build failed: {describe_error(exc)}'
            self._models[spec.label] = (model, error)
        model, error = self._models[spec.label]
        if model is None:
            return None, error
        return copy.deepcopy(model).to(self.device), None

    def projected_step(self, spec: ModelSpec, shape: Shape, precision: str,
                       backend: Optional[str] = None) -> Optional[list]:
        """The ops of one training step of ``spec`` as the cost model
        records it (on the meta device; None where it cannot be built)."""
        if precision not in PROJECTED:
            return None
        # fp16 moves the bytes bf16 does: one projection serves both.
        key = (spec.label, shape, 'bf16', backend)
        if key not in self._steps:
            try:
                with torch.device('meta'):
                    model = build_model(spec, self.smoke, **(
                        dict(attn_backend=backend) if backend else {}))
                saved = cost_model.SavedActivations(model)
                self._steps[key] = cost_model.record_step(
                    model, shape, self.settings.batch, torch.bfloat16,
                    activations=saved)
                self._memory[key] = (
                    sum(p.numel() for p in model.parameters()),
                    saved.nbytes)
                if backend == 'triton':
                    # Kept for a fit on the kernels as launched
                    # (calibrate.py --launches).
                    self._launched[key] = cost_model.record_step(
                        model, shape, self.settings.batch, torch.bfloat16,
                        launches=True)
                self._keep_steps()
            except Exception as exc:  # the row says it has no projection
                self.log(f'[cost model] {spec.label}: '
                         f'{describe_error(exc)}')
                self._steps[key] = None
        return self._steps[key]

    def _keep_steps(self) -> None:
        """Write the recorded steps beside the CSVs (``steps.json``, as
        benchmarks/calibrate.py reads them): a later fit then compares each
        measured time with the step that ran (and each peak with what the
        step kept: the rows' ``parameters`` and ``saved_mib``)."""
        kept = {cost_model.step_name(label, h, w, backend, launched):
                cost_model.tally(ops)
                for launched, steps in ((False, self._steps),
                                        (True, self._launched))
                for (label, (h, w), _, backend), ops in steps.items()
                if ops}
        with open(osp.join(self.out, cost_model.STEPS_FILE), 'w') as f:
            json.dump(kept, f)

    def projected_kernels(self, spec: ModelSpec, shape: Shape,
                          backend: str) -> Dict[str, float]:
        """:func:`projected_kernel_ms` of a bf16 step on a GPU, a fused
        one as launched (each Triton kernel by its name); empty elsewhere
        (no device clock to set it beside) or without a projection."""
        if self.device.type != 'cuda' or self.projected_step(
                spec, shape, 'bf16', backend) is None:
            return {}
        key = (spec.label, shape, 'bf16', backend)
        return projected_kernel_ms(
            self._launched.get(key) or self._steps[key], self.hardware)

    def projection(self, spec: ModelSpec, shape: Shape, precision: str,
                   backend: Optional[str] = None):
        """The cost model's projection of a step (None if none)."""
        ops = self.projected_step(spec, shape, precision, backend)
        return None if ops is None else cost_model.project(ops,
                                                           self.hardware)

    def projected_memory(self, spec: ModelSpec, shape: Shape,
                         precision: str,
                         backend: Optional[str] = None) -> dict:
        """A row's memory columns: the step's projected peak in MiB
        (:func:`cost_model.projected_peak_mib`), the model's parameters and
        the MiB its forward keeps for the backward (what a later fit of
        the peaks reads); empty if the step is not projected."""
        if self.projected_step(spec, shape, precision, backend) is None:
            return {}
        parameters, saved = self._memory[(spec.label, shape, 'bf16',
                                          backend)]
        return dict(projected_peak_mib=cost_model.projected_peak_mib(
            parameters, saved), parameters=parameters, saved_mib=saved / 2**20)

    def calibrate(self, rows: Sequence[dict]) -> None:
        """Where a projected ratio is off by more than 25%, fit the cost
        model's MFU, bandwidth efficiency and dispatch cost to the measured
        step times (:func:`cost_model.calibrate`) and say what they are."""
        errors = [abs(r['ratio_error']) for r in rows
                  if r.get('ratio_error') not in (None, '')]
        samples = []
        for r in rows:
            # bf16 only: fp16's GradScaler ops are not in the projection.
            if r['status'] != 'ok' or r['precision'] != 'bf16':
                continue
            ops = self._steps.get((r['model'], (r['height'], r['width']),
                                   'bf16', 'triton' if r.get('attn_backend')
                                   == 'triton' else None))
            if ops:
                samples.append((ops, r['step_ms']))
        if not errors or max(errors) <= 0.25 or len(samples) < 2:
            return
        fitted, fit_error = cost_model.calibrate(samples, self.hardware)
        self.calibration = (
            f'largest projected-ratio error {max(errors) * 100:.0f}% > 25%: '
            f'fitted to the {len(samples)} measured steps: '
            f'mfu={fitted.mfu}, bandwidth_efficiency='
            f'{fitted.bandwidth_efficiency}, dispatch_us='
            f'{fitted.dispatch_us} (RMS log error {fit_error:.2f}; peak, '
            'bandwidth and kernel floor kept). Re-project with '
            '`benchmarks/cost_model.py --mfu ... --bandwidth-efficiency ... '
            '--dispatch-us ...`.')
        self.log(f'[cost model] {self.calibration}')

    def attempt(self, error: Optional[str], min_left: float,
                limit: float, fn: Callable[[], dict]):
        """Run one measurement: (result, 'ok', '') or (None, status,
        note) for an earlier error, too little time left, an exception
        or running over ``limit`` seconds (or the section's end)."""
        if error is not None:
            return None, 'error', error
        left = self.budget.left()
        if left < min_left:
            return None, 'skipped', (f'time budget: {max(left, 0):.0f} s '
                                     'left in the section')
        result, status, note = None, 'ok', ''
        try:
            with time_limit(min(limit, left)):
                result = fn()
        except MeasurementTimeout as exc:
            status, note = 'error', str(exc)
        except Exception as exc:  # OOM, unsupported op: record, go on
            status, note = 'error', describe_error(exc)
            if os.environ.get('GPU_SUITE_TRACEBACKS'):
                traceback.print_exc()
        release_memory(self.device, collect=status != 'ok')
        return result, status, note


RUNNERS = dict(kernels=(run_kernels, kernels_markdown),
               tuning=(run_tuning, tuning_markdown),
               train=(run_train, train_markdown),
               backends=(run_backends, backends_markdown),
               numerics=(run_numerics, numerics_markdown),
               core=(run_core, core_markdown),
               compile=(run_compile, compile_markdown))

SECTION_TITLES = dict(
    train='Training step (train.csv)',
    backends='Eager vs fused attention (backends.csv)',
    numerics='fp16 / bf16 numerics (numerics.csv)',
    core='Attention modules alone (core.csv)',
    compile='torch.compile (compile.csv)',
    kernels='Where a step\'s time goes, device and host (kernels.csv)',
    tuning='The kernels\' launch settings (tuning.csv)')


#: How a row's projected peak is made, for the section notes.
PEAK_RULE = (f'{cost_model.PEAK_BYTES_PER_PARAMETER} bytes a parameter + '
             f'{cost_model.PEAK_PER_SAVED_BYTE} x the activations the cost '
             'model counts the forward keeping (its fit to the kept H200 '
             'runs)')


def section_notes(settings: Settings, device: torch.device) -> Dict[str, str]:
    s = settings
    res = ', '.join(f'{h}x{w}' for h, w in s.resolutions)
    memory = ('peak = `torch.cuda.max_memory_allocated` over the timed '
              'steps, weights, gradients and AdamW state included'
              if device.type == 'cuda' else 'no memory figures off CUDA')
    return dict(
        train=(f'Batch {s.batch} at {res}; AdamW; {s.train_warmup} warm-up '
               f'+ {s.train_steps} timed steps; fp16 with GradScaler '
               '(its default initial scale, 2^16). '
               'Speed ratio = images/s / the baseline\'s (above 1: faster); '
               f'memory ratio = peak / the baseline\'s; {memory}. '
               'Projected = the cost model\'s speed ratio (an H100\'s '
               'parameters, this run\'s archs and sizes; bf16 and fp16 '
               'rows); error = measured / projected - 1; projected peak '
               f'= {PEAK_RULE}; attn_backend = what the family\'s '
               'attentions ran.'),
        backends=('Training step of each family at the first input size, '
                  'bf16 on CUDA (fp32 elsewhere), the same weights with '
                  "attn_backend='eager' and 'triton'; speed-up = eager ms / "
                  'fused ms; projected = the cost model\'s, of a bf16 step '
                  'on an H100; peaks measured as in the training section, '
                  f'and projected ({PEAK_RULE}).'),
        numerics=(f'{s.numerics_steps} steps per precision from the same '
                  f'initial weights, {s.numerics_shape[0]}x'
                  f'{s.numerics_shape[1]} batch {s.numerics_batch}, fixed '
                  'random input and target (MSE of the outputs\' spatial '
                  'means, plus LaViT\'s DP loss), AdamW lr %g; fp16 with '
                  'GradScaler (a skipped step is one whose scale went '
                  'down).' % s.lr),
        core=('One attention module (two for LaViT\'s VA + LA pair) at '
              'its family\'s stage-1 width, forward + backward of the '
              f'mean output, batch {s.core_batch}; median of '
              f'{s.core_repeats}. Time / memory ratio = the module\'s / '
              'fused softmax SDPA\'s on the same tokens and heads (no '
              'projections); peak = above the inputs and weights.'),
        kernels=(f'One training step of each family at the first input size '
                 f'(batch {s.batch}, bf16 on CUDA), eager and fused, under '
                 f'torch.profiler ({s.kernel_steps} steps after 2): on '
                 'a GPU the kernels by their own device time per step '
                 '(clock device), and on every device the ops by their '
                 'own host time (clock host: a custom op\'s Python and '
                 'its kernels\' launches); rank 0 = all of a clock, '
                 'beside the profiled step\'s wall time (device time far '
                 'below it: the step is bound by the host); share = of '
                 'the clock\'s whole; projected = the cost model\'s ms '
                 'of the step\'s kernels (an H100\'s roofline; a fused '
                 'step as launched, each Triton kernel by its name), of '
                 'roofline = projected / measured.'),
        tuning=('Each family\'s fused training step (first input size, '
                f'batch {s.batch}, bf16 on CUDA) with each launch setting '
                'of the kernel modules it uses, one module at a time; '
                'speed vs own = the step with the module\'s own setting '
                '(the first row) / with this one (above 1: faster).'),
        compile=(f'Batch 1 at {s.compile_shapes[0][0]}x'
                 f'{s.compile_shapes[0][1]}, fp32, no grad; '
                 f'`torch.compile(backend={s.compile_backend!r}, '
                 'dynamic=True)`; compile s = the first call; recompiled '
                 'graphs = graphs compiled again for '
                 + ', '.join(f'{h}x{w}' for h, w in s.compile_shapes[1:])
                 + '; speed-up = eager / compiled latency (median of '
                 f'{s.compile_repeats}).'))


def write_summary(out: str, env: dict, tables: Dict[str, Table],
                  notes: List[str], settings: Settings,
                  device: torch.device) -> str:
    device_line = env.get('gpu') or env.get('cpu') or env['device']
    lines = [
        '# GPU suite: every family against its baseline', '',
        f"Device: {device_line}"
        + (f", driver {env['driver']}" if env.get('driver') else '')
        + f"; torch {env['torch']}, CUDA {env['torch_cuda']}, "
        f"Triton {env['triton']}; "
        f"{'smoke run' if env['smoke'] else 'full run'}, "
        f"started {env['started']}.",
        f"Command: `{env['command']}`", ''
    ]
    if notes:
        lines += ['Notes:', ''] + [f'* {n}' for n in notes] + ['']
    if env.get('calibration'):
        lines += ['Cost model: ' + env['calibration'], '']
    if 'train' in tables or 'numerics' in tables:
        lines += ['## Headline', '',
                  'Training-step speed (images/s) and peak memory of each '
                  'family as a ratio to its baseline\'s, measured in the '
                  'same run (speed above 1: faster; memory below 1: '
                  'lighter); whether the fp16 (GradScaler) and bf16 runs '
                  'of the numerics section kept a finite loss.', '',
                  headline_markdown(tables), '']
    explain = section_notes(settings, device)
    for name in SECTIONS + EXTRA_SECTIONS:
        if name not in tables:
            continue
        lines += [f'## {SECTION_TITLES[name]}', '', explain[name], '',
                  RUNNERS[name][1](tables[name]), '']
    text = '\n'.join(lines)
    with open(osp.join(out, 'summary.md'), 'w') as f:
        f.write(text)
    return text


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Every family against its baseline on one device: '
        'training speed and memory, fp16/bf16 numerics, attention modules '
        'alone, torch.compile')
    parser.add_argument('--device', default='cuda'
                        if torch.cuda.is_available() else 'cpu',
                        choices=['cuda', 'cpu'])
    parser.add_argument('--out', default=os.environ.get('OUT') or
                        'work_dirs/gpu_suite',
                        help='output folder (default: $OUT, else '
                        'work_dirs/gpu_suite)')
    parser.add_argument('--smoke', action='store_true',
                        help='tiny archs and sizes, few steps, compile with '
                        "backend='eager': every code path in seconds")
    parser.add_argument('--only', help='comma-separated sections of '
                        + ', '.join(SECTIONS) + ' (default: those), and '
                        + ', '.join(EXTRA_SECTIONS))
    parser.add_argument('--models', help='comma-separated model labels '
                        '(default: all): ' + ', '.join(SPECS))
    parser.add_argument('--budget-s', type=float, default=420,
                        help='time for all sections; the ones it no longer '
                        'covers are skipped with a note (default 420)')
    parser.add_argument('--compile-backend',
                        help="dynamo backend (default: 'inductor'; 'eager' "
                        'with --smoke)')
    parser.add_argument('--threads', type=int,
                        help='torch intra-op threads (default: 1 for a CPU '
                        'smoke run, which shares its cores; else torch\'s)')
    parser.add_argument('--share', action='append', default=[],
                        metavar='SECTION=FRACTION',
                        help='share of the budget a section is sure of '
                        f'(default {SECTION_SHARES})')
    parser.add_argument('--simulate-no-mmcv-ops', action='store_true',
                        help="make mmcv's compiled extension (mmcv._ext) "
                        'fail to import, as on the GPU machine')
    args = parser.parse_args(argv)
    args.sections = SECTIONS if not args.only else tuple(
        s.strip() for s in args.only.split(',') if s.strip())
    unknown = set(args.sections) - set(SECTIONS + EXTRA_SECTIONS)
    if unknown:
        parser.error(f'unknown sections {sorted(unknown)}; choose from '
                     f'{SECTIONS + EXTRA_SECTIONS}')
    labels = [m.strip() for m in (args.models or '').split(',')
              if m.strip()]
    unknown = [m for m in labels if m not in SPECS]
    if unknown:
        parser.error(f'unknown models {unknown}; choose from {list(SPECS)}')
    args.specs = [s for s in MODEL_SPECS if not labels or s.label in labels]
    args.shares = dict(SECTION_SHARES)
    for item in args.share:
        name, _, value = item.partition('=')
        if name not in SECTIONS + EXTRA_SECTIONS:
            parser.error(f'--share {item}: unknown section')
        args.shares[name] = float(value)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    if args.simulate_no_mmcv_ops:
        # What an mmcv built with MMCV_WITH_OPS=0 lacks: the compiled
        # extension (mmcv.ops and what imports it then fail as there).
        sys.meta_path.insert(0, _Blocker(['mmcv._ext']))
    device = torch.device(args.device)
    if device.type == 'cuda' and not torch.cuda.is_available():
        print('gpu_suite: --device cuda but CUDA is not available',
              file=sys.stderr)
        return 2
    if args.threads is None and args.smoke and device.type == 'cpu':
        args.threads = 1
    if args.threads:
        torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    settings = Settings.smoke() if args.smoke else Settings.full()
    if args.compile_backend:
        settings.compile_backend = args.compile_backend

    env = environment(device, args)
    env_path = osp.join(args.out, 'env.json')

    def write_env():
        with open(env_path, 'w') as f:
            json.dump(env, f, indent=2, default=str)

    write_env()
    try:
        import vitattn_mm
        env['vitattn_mm'] = getattr(vitattn_mm, '__version__', None)
    except Exception as exc:
        env['vitattn_mm_import_error'] = traceback.format_exc()
        write_env()
        print(f'gpu_suite: import vitattn_mm failed: {describe_error(exc)}'
              '\n(full traceback in env.json)', file=sys.stderr)
        return 3
    # What is alive now stays: later collections scan only what the
    # measurements make (a full one costs ~0.5 s after these imports).
    gc.collect()
    gc.freeze()
    env['forbidden_imports_after_import'] = forbidden_modules()
    env['import_s'] = round(time.perf_counter() - started, 1)
    env['registries'] = {
        spec.type: registered_class(spec.type)[1] for spec in MODEL_SPECS}
    env['arch_errors'] = {s.label: e for s in MODEL_SPECS
                          if (e := check_arch(s)) is not None}
    write_env()
    print(f"gpu_suite on {env.get('gpu') or env.get('cpu')}: torch "
          f"{env['torch']}, CUDA {env['torch_cuda']}, Triton "
          f"{env['triton']}; sections {', '.join(args.sections)}; budget "
          f'{args.budget_s:.0f} s', flush=True)
    if env['forbidden_imports_after_import']:
        print('warning: import vitattn_mm imported '
              + ', '.join(env['forbidden_imports_after_import']), flush=True)

    budget = Budget(args.budget_s, args.sections, args.shares)
    ctx = Context(device, settings, budget, args.out, args.smoke,
                  args.specs)
    tables: Dict[str, Table] = {}
    notes: List[str] = []
    for name in args.sections:
        seconds = budget.open(name)
        print(f'\n== {name}: up to {max(seconds, 0):.0f} s', flush=True)
        start = time.perf_counter()
        try:
            tables[name] = RUNNERS[name][0](ctx)
        except Exception as exc:  # a bug in a section: keep the others
            notes.append(f'section {name} stopped: {describe_error(exc)}')
            traceback.print_exc()
        elapsed = time.perf_counter() - start
        if name in tables:
            rows = tables[name].rows
            failed = [r for r in rows if r['status'] != 'ok']
            if failed:
                kinds = sorted({r['status'] for r in failed})
                notes.append(f'{name}: {len(failed)} of {len(rows)} rows '
                             + '/'.join(kinds) + ' (see the note column)')
            print(f'\n{SECTION_TITLES[name]}, {elapsed:.0f} s:\n'
                  + RUNNERS[name][1](tables[name]), flush=True)
        env.setdefault('section_s', {})[name] = round(elapsed, 1)
        if ctx.calibration:
            env['calibration'] = ctx.calibration
        env['forbidden_imports_at_end'] = forbidden_modules()
        write_env()
        write_summary(args.out, env, tables, notes, settings, device)
    env['total_s'] = round(time.perf_counter() - started, 1)
    write_env()
    write_summary(args.out, env, tables, notes, settings, device)
    if 'train' in tables or 'numerics' in tables:
        print('\nHeadline (ratios to the baseline; summary.md has it all):\n'
              + headline_markdown(tables))
    for note in notes:
        print(f'note: {note}')
    print(f'\ngpu_suite: {env["total_s"]:.0f} s in all; tables in '
          f'{osp.abspath(args.out)}', flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
