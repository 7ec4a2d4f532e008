"""Latency, peak memory and throughput of backbones, measured side by side.

Models under comparison are timed in interleaved repeats (A, B, A, B, ...)
so that drift of a shared machine hits all of them alike; figures are
medians with the inter-quartile range as spread. Peak memory is what one
pass needs above the resident model: ``torch.cuda.max_memory_allocated`` on
a GPU; on Linux CPUs the process' peak resident set (``VmHWM``, reset
through ``/proc/self/clear_refs`` before each pass).
"""
import ctypes
import gc
import json
import os
import os.path as osp
import re
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn
from mmengine.config import Config
from mmengine.registry import MODELS, init_default_scope

#: Named backbones for comparisons (baselines and one model per family).
PRESETS: Dict[str, dict] = {
    # baselines (mmdet's own implementations)
    'swin-t': dict(type='mmdet.SwinTransformer'),
    'swin-s': dict(type='mmdet.SwinTransformer', depths=(2, 2, 18, 2)),
    'pvt-t': dict(type='mmdet.PyramidVisionTransformer',
                  num_layers=[2, 2, 2, 2]),
    'pvt-s': dict(type='mmdet.PyramidVisionTransformer',
                  num_layers=[3, 4, 6, 3]),
    'pvtv2-b1': dict(type='mmdet.PyramidVisionTransformerV2',
                     embed_dims=64, num_layers=[2, 2, 2, 2]),
    # plain ViT-S/16 with global softmax attention (MSF's own "Orig." model)
    'vit-s': dict(type='MSFViT', arch='small', mean_shift=False),
    # the families
    'flatten-swin-t': dict(type='FLattenSwinTransformer', arch='tiny'),
    'flatten-pvt-t': dict(type='FLattenPVT', arch='tiny'),
    'l2vit-t': dict(type='L2ViT', arch='tiny'),
    'lavit-s': dict(type='LaViT', arch='small'),
    'msf-swin-t': dict(type='MSFSwinTransformer', arch='tiny'),
    'msf-vit-s': dict(type='MSFViT', arch='small'),
}

#: (model, baseline) pairs of ``tools/benchmark.py --suite``.
SUITE = [
    ('flatten-swin-t', 'swin-t'),
    ('flatten-pvt-t', 'pvt-t'),
    ('l2vit-t', 'swin-t'),
    ('lavit-s', 'pvt-s'),
    ('msf-swin-t', 'swin-t'),
    ('msf-vit-s', 'vit-s'),
]


def attention_preset(name: str) -> dict:
    """Swin-T with the registered attention ``name`` in every block, placed
    by its ``layer_plan`` (windowed where it needs a window): every
    attention of the registry is a preset under its own name, so a new one
    is benchmarked against ``swin-t`` with no list to edit."""
    from vitattn_mm.registry import ATTENTIONS
    depths = [2, 2, 6, 2]
    return dict(type='AttnSwinTransformer', arch='tiny',
                attn_cfgs=ATTENTIONS.get(name).layer_plan(depths))


def preset_names() -> List[str]:
    """The named presets and every registered attention."""
    from vitattn_mm.registry import ATTENTIONS
    return sorted(PRESETS) + sorted(ATTENTIONS.module_dict)


def backbone_cfg(model: str) -> Tuple[str, dict]:
    """The config of a backbone named by a preset, a config file (its
    backbone), ``Type[:arch]``, an attention's name or a JSON dict, without
    its weights. Returns (label, cfg); sets the registry scope it builds
    in."""
    from vitattn_mm.registry import ATTENTIONS
    init_default_scope('mmdet')
    if model in PRESETS:
        cfg = dict(PRESETS[model])
    elif model in ATTENTIONS.module_dict:
        cfg = attention_preset(model)
    elif model.endswith('.py'):
        cfg = Config.fromfile(model).model.backbone.to_dict()
        init_default_scope(Config.fromfile(model).default_scope)
    elif model.startswith('{'):
        cfg = json.loads(model)
    else:
        type_name, _, arch = model.partition(':')
        cfg = dict(type=type_name)
        if arch:
            cfg['arch'] = arch
    cfg.pop('init_cfg', None)
    cfg.pop('pretrained', None)
    label = model if not model.endswith('.py') else osp.splitext(
        osp.basename(model))[0]
    return label, cfg


def build_backbone(model: str) -> Tuple[str, nn.Module]:
    """A backbone named as :func:`backbone_cfg` takes it. Returns (label,
    module)."""
    label, cfg = backbone_cfg(model)
    return label, MODELS.build(cfg)


@dataclass
class Measurement:
    """Timings and peak memory of one model at one input size."""
    name: str
    shape: Tuple[int, int]
    batch: int
    mode: str
    times: List[float] = field(default_factory=list)
    peak_bytes: Optional[int] = None

    @property
    def median(self) -> float:
        return float(np.median(self.times))

    @property
    def spread(self) -> float:
        q1, q3 = np.percentile(self.times, [25, 75])
        return float(q3 - q1)

    @property
    def images_per_s(self) -> float:
        return self.batch / self.median

    @property
    def pixels(self) -> int:
        return self.shape[0] * self.shape[1]


def _release_freed_memory() -> None:
    """Hand freed heap pages back to the OS, so that the resident set (and
    its high-water mark) measures what the next run allocates rather than
    what earlier models left cached in the allocator."""
    gc.collect()
    try:
        ctypes.CDLL('libc.so.6').malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _cpu_peak_rss_reset() -> Optional[int]:
    _release_freed_memory()
    try:
        with open('/proc/self/clear_refs', 'w') as f:
            f.write('5')
        return _cpu_rss('VmRSS')
    except OSError:
        return None


def _cpu_rss(key: str) -> int:
    with open('/proc/self/status') as f:
        return int(re.search(rf'{key}:\s+(\d+)', f.read()).group(1)) * 1024


def _autocast(device: torch.device, amp: bool):
    if not amp:
        return nullcontext()
    dtype = torch.float16 if device.type == 'cuda' else torch.bfloat16
    return torch.autocast(device.type, dtype=dtype)


def run_once(model: nn.Module, x: torch.Tensor, mode: str,
             amp: bool) -> None:
    """One forward pass (no grad) or forward + backward of ``model`` on
    ``x``, synchronised on CUDA."""
    if mode == 'train':
        with _autocast(x.device, amp):
            outs = model(x)
        loss = sum(o.float().mean() for o in outs)
        loss.backward()
        model.zero_grad(set_to_none=True)
    else:
        with torch.no_grad(), _autocast(x.device, amp):
            model(x)
    if x.device.type == 'cuda':
        torch.cuda.synchronize()


def _peak_bytes(model: nn.Module, x: torch.Tensor, mode: str,
                amp: bool) -> Optional[int]:
    gc.collect()
    if x.device.type == 'cuda':
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        run_once(model, x, mode, amp)
        return torch.cuda.max_memory_allocated() - base
    base = _cpu_peak_rss_reset()
    if base is None:
        return None
    run_once(model, x, mode, amp)
    return max(_cpu_rss('VmHWM') - base, 0)


def measure(models: Dict[str, nn.Module],
            shape: Sequence[int],
            batch: int = 1,
            mode: str = 'forward',
            warmup: int = 2,
            repeats: int = 5,
            amp: bool = False,
            device: str = 'cpu') -> Dict[str, Measurement]:
    """Time ``models`` side by side on ``(batch, 3, H, W)`` inputs.

    Args:
        models (dict[str, nn.Module]): Name -> backbone.
        shape (tuple[int, int]): Input (H, W).
        batch (int): Batch size. Default: 1.
        mode (str): 'forward' (no grad) or 'train' (forward + backward).
            Default: 'forward'.
        warmup (int): Untimed passes per model. Default: 2.
        repeats (int): Timed passes per model. Default: 5.
        amp (bool): fp16 autocast on CUDA, bf16 on CPU. Default: False.
        device (str): Default: 'cpu'.
    """
    device = torch.device(device)
    x = torch.randn(batch, 3, *shape, device=device)
    results = {name: Measurement(name, tuple(shape), batch, mode)
               for name in models}
    for model in models.values():
        model.to(device).train(mode == 'train')
    for name, model in models.items():
        for _ in range(warmup):
            run_once(model, x, mode, amp)
        results[name].peak_bytes = _peak_bytes(model, x, mode, amp)
    for _ in range(repeats):
        for name, model in models.items():  # interleaved: drift hits all
            start = time.perf_counter()
            run_once(model, x, mode, amp)
            results[name].times.append(time.perf_counter() - start)
    return results


def gemm_rate(size: int = 2048, repeats: int = 5) -> float:
    """The machine's fp32 matrix-multiply rate on the CPU with the current
    threads, in multiply-adds per second (best of ``repeats``): what a
    network whose time went to large matmuls would reach."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    best = float('inf')
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return size**3 / best


def fit_exponent(pixels: Sequence[float], values: Sequence[float]) -> float:
    """Slope of log(value) over log(pixels): 1 = linear, 2 = quadratic."""
    return float(np.polyfit(np.log(pixels), np.log(values), 1)[0])


def write_csv(path: str, rows: Sequence[Measurement]) -> None:
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    with open(path, 'w') as f:
        f.write('model,height,width,batch,mode,median_s,iqr_s,images_per_s,'
                'peak_mib\n')
        for m in rows:
            peak = ('' if m.peak_bytes is None else
                    f'{m.peak_bytes / 2**20:.1f}')
            f.write(f'{m.name},{m.shape[0]},{m.shape[1]},{m.batch},{m.mode},'
                    f'{m.median:.5f},{m.spread:.5f},{m.images_per_s:.3f},'
                    f'{peak}\n')


def plot_sweep(path: str, rows: Sequence[Measurement],
               exponents: Dict[str, Tuple[float, Optional[float]]],
               title: str) -> None:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name in exponents:
        series = [m for m in rows if m.name == name]
        px = [m.pixels / 1e6 for m in series]
        t_exp, m_exp = exponents[name]
        ax_t.plot(px, [m.median for m in series], 'o-',
                  label=f'{name} (x^{t_exp:.2f})')
        if m_exp is not None:
            ax_m.plot(px, [m.peak_bytes / 2**20 for m in series], 'o-',
                      label=f'{name} (x^{m_exp:.2f})')
    for ax, label in ((ax_t, 'latency (s)'), (ax_m, 'peak memory (MiB)')):
        ax.set_xscale('log')
        ax.set_yscale('log')
        ax.set_xlabel('input megapixels')
        ax.set_ylabel(label)
        ax.grid(True, which='both', alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
