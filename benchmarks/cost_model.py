"""Projected GPU cost of one training step, recorded on the meta device.

Where no GPU is at hand, this is the measure every change is judged by: it
runs on the CPU in seconds and needs no memory for activations.

What it records: one training step of a backbone (forward at batch 2 under
an emulated CUDA autocast, then the backward of the mean of its outputs,
auxiliary losses included) on the meta device, every aten op through a
``TorchDispatchMode``. Per op:

* **FLOPs** from torch's own formulas (``torch.utils.flop_counter``), with
  one correction: torch counts the weight gradient of a grouped
  convolution as if it were dense (a depthwise 7x7 over 96 channels
  counted 96 times over); here it costs what its forward costs.
* **Bytes**: inputs plus outputs at their dtype, each tensor by the
  elements it spans (a broadcast dimension is read once); a fill
  (``new_ones``, ``zeros_like``, ...) only writes. Views, allocations
  and metadata ops are free.
* **Fused kernels count once each way**, as a GPU runs them:
  ``F.scaled_dot_product_attention`` on 4-D inputs is one forward and one
  backward kernel (the meta device would decompose it into the math
  path); a float mask whose rows are not 16-aligned is padded first, as
  torch's memory-efficient path does; a boolean mask is converted first.
  5-D inputs take the math path, as on a GPU. Custom ops (``torch.library``,
  this package's fused attentions) are one op each way with the FLOP
  formula they register; with ``--launches`` (:func:`record_step`), their
  CUDA implementation runs on the meta tensors instead, each Triton launch
  a kernel that moves its tensor arguments once.

Autocast: torch has no autocast on the meta device. :class:`MetaAutocast`
applies CUDA's policy (matmuls, convolutions and attention in the
low-precision dtype with the casts of parameters cached; norms and ``pow``
cast to fp32; softmax and sums given ``dtype=float32`` unless the call
names one, which on a GPU costs a cast only where aten casts first: a
softmax of bf16) while the CPU's autocast flag is on, so regions that the
model runs in fp32 (``full_precision``) stay fp32 here too.

Memory: the bytes autograd keeps for the backward (the activations a
step holds at the end of its forward: most of a training step's peak
beyond the weights, their gradients and the optimizer's state), counted
by :class:`SavedActivations` while the forward is recorded: every saved
tensor's storage once (views of one tensor share it), parameters and
buffers left out.

Time per op is the largest of ``FLOPs / (peak x MFU)``, ``bytes /
(bandwidth x efficiency)`` and a kernel floor; the step is the larger of the
kernels back to back and the eager dispatch (``ops x dispatch``), which
overlap. The defaults are an H100 SXM's (989 TFLOP/s dense bf16 at 60%,
3.35 TB/s at 80%, 2.5 us, 6 us per op); every one is an option.

Examples::

    # every family against its stock class and its softmax skeleton
    python benchmarks/cost_model.py
    python benchmarks/cost_model.py --sizes 800x1280 --top 8
    # the families with the fused kernels (attn_backend='triton')
    python benchmarks/cost_model.py --backend triton
    # one family, ops listed; or a baseline alone (its label)
    python benchmarks/cost_model.py --models flatten-swin-t --top 20
    python benchmarks/cost_model.py --models attnpvt-s --top 20
"""
import argparse
import contextlib
import math
import os.path as osp
import sys
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import (flop_registry, sdpa_backward_flop_count,
                                      sdpa_flop_count)

aten = torch.ops.aten
Shape = Tuple[int, int]

# ------------------------------------------------------------ the hardware


@dataclass(frozen=True)
class Hardware:
    """What a projected op costs on the GPU (defaults: H100 SXM, bf16).

    Args:
        peak_tflops (float): Dense tensor-core peak. Default: 989.
        mfu (float): Share of the peak a kernel reaches. Default: 0.6.
        bandwidth_tbs (float): Memory bandwidth in TB/s. Default: 3.35.
        bandwidth_efficiency (float): Share of it a kernel reaches.
            Default: 0.8.
        min_kernel_us (float): The least time of any kernel. Default: 2.5.
        dispatch_us (float): Eager dispatch per op (Python, autograd and
            launch), overlapping the kernels. Default: 6.
        fused_efficiency (float): How close this package's custom ops
            (its Triton kernels, :data:`FUSED_NAMESPACE`) come to the
            roofline that aten's kernels reach: their time is divided by
            it. Default: 1 (as fast as the roofline says).
    """
    peak_tflops: float = 989.
    mfu: float = 0.6
    bandwidth_tbs: float = 3.35
    bandwidth_efficiency: float = 0.8
    min_kernel_us: float = 2.5
    dispatch_us: float = 6.
    fused_efficiency: float = 1.

    def kernel_us(self, flops: float, nbytes: float,
                  fused: bool = False) -> float:
        """Projected time of one kernel in microseconds (``fused``: one of
        this package's custom ops)."""
        compute = flops / (self.peak_tflops * 1e12 * self.mfu) * 1e6
        memory = nbytes / (self.bandwidth_tbs * 1e12 *
                           self.bandwidth_efficiency) * 1e6
        us = max(compute, memory, self.min_kernel_us)
        return us / self.fused_efficiency if fused else us


#: The namespace of this package's custom ops (the Triton kernels on a
#: GPU); the cost model's own stand-in for SDPA is ``vitattn_cost::``.
FUSED_NAMESPACE = 'vitattn::'


def is_fused(name: str) -> bool:
    """Whether a recorded op is one of this package's custom ops."""
    return name.startswith(FUSED_NAMESPACE)


#: Parameter sets by name (``--hardware``). 'h200-eager-2026-11' is
#: :func:`calibrate`'s fit to the GPU runs of 2026-11-27 kept in
#: ``benchmarks/gpu_runs/`` (H200, torch 2.11, batch 2, bf16; 24 steps, RMS
#: log error 0.18 against 1.44 with the defaults): peak and bandwidth kept
#: at the H100's, the eager step dispatch-bound at 32 us per op, and the
#: Triton kernels at 7.5% of the roofline aten's kernels reach (every fused
#: step measured was slower than its eager one; docs/benchmarks.md).
HARDWARE = {
    'h100-roofline': Hardware(),
    'h200-eager-2026-11': Hardware(mfu=0.03, bandwidth_efficiency=0.5,
                                   dispatch_us=32., fused_efficiency=0.075),
}


# ------------------------------------------------------- the recorded ops


@dataclass
class OpRecord:
    """One kernel of the step: its aten (or custom) op, FLOPs and bytes."""
    name: str
    flops: int
    nbytes: int
    phase: str  # 'forward' or 'backward'


#: Ops that launch no kernel: allocation, aliasing and metadata.
FREE_OPS = {
    aten.empty.memory_format, aten.empty_strided.default,
    aten.empty_like.default, aten.new_empty.default,
    aten.new_empty_strided.default, aten._unsafe_view.default,
    aten.detach.default, aten.alias.default, aten.lift_fresh.default,
    aten.is_same_size.default, aten._reshape_alias.default,
    aten.set_.source_Storage_storage_offset,
    # Metadata: a dtype from dtypes, no tensor in or out.
    aten.promote_types.default,
}


#: Fills: a kernel that writes its output and reads no tensor (the one
#: passed gives only the dtype, device or shape).
FILLS = {
    aten.new_zeros.default, aten.new_ones.default, aten.new_full.default,
    aten.zeros_like.default, aten.ones_like.default, aten.full_like.default,
}


def _is_view(func) -> bool:
    """Whether ``func`` returns an alias of an input (a view: free)."""
    returns = func._schema.returns
    return bool(returns) and all(
        r.alias_info is not None and not r.alias_info.is_write
        for r in returns)


def _tensors(tree) -> Iterator[torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        yield tree
    elif isinstance(tree, (list, tuple)):
        for item in tree:
            yield from _tensors(item)
    elif isinstance(tree, dict):
        for item in tree.values():
            yield from _tensors(item)


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes a kernel moves for ``t``: the elements it spans (a broadcast,
    stride-0 dimension counts once) at its dtype."""
    numel = 1
    for size, stride in zip(t.shape, t.stride()):
        if stride != 0:
            numel *= size
    return numel * t.element_size()


def _grouped_conv_backward_flops(grad_out, x, weight, bias, stride, padding,
                                 dilation, transposed, output_padding, groups,
                                 output_mask, out) -> int:
    """``convolution_backward``: the input gradient costs the forward's
    FLOPs, and so does the weight gradient (torch's formula counts it as a
    dense convolution, ``groups`` times too many)."""
    out_shape = (x if transposed else grad_out).shape
    c_out, c_in_per_group, *kernel = weight.shape
    forward = 2 * out_shape[0] * math.prod(out_shape[2:]) * c_out * \
        c_in_per_group * math.prod(kernel)
    return forward * (int(output_mask[0]) + int(output_mask[1]))


class StepRecorder(TorchDispatchMode):
    """Records every kernel of what runs inside it (see the module
    docstring for what counts)."""

    def __init__(self, launches: bool = False):
        super().__init__()
        self.ops: List[OpRecord] = []
        self.phase = 'forward'
        self.launches = launches
        self._launching: Optional[List] = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.launches and f'{func.namespace}::' == FUSED_NAMESPACE:
            return self._kernel_path(func, args, kwargs)
        out = func(*args, **kwargs)
        if func in FREE_OPS or _is_view(func) or \
                func.namespace == 'prim' or func.__name__.startswith('sym_'):
            return out
        if func is aten.convolution_backward.default:
            flops = _grouped_conv_backward_flops(*args, **kwargs, out=out)
        else:
            formula = flop_registry.get(func._overloadpacket)
            flops = formula(*args, **kwargs, out_val=out) if formula else 0
        nbytes = sum(map(tensor_bytes, _tensors(out)))
        if func not in FILLS:
            # An out= argument is written (counted with the output), not
            # read; nor is the tensor copy_ overwrites.
            written = {a.name for a in func._schema.arguments if a.is_out}
            read = {k: v for k, v in kwargs.items() if k not in written}
            sources = args[1:] if func is aten.copy_.default else args
            nbytes += sum(map(tensor_bytes, _tensors((sources, read))))
        self.ops.append(OpRecord(str(func.name()), int(flops), int(nbytes),
                                 self.phase))
        return out

    def _kernel_path(self, func, args, kwargs):
        """One of the package's custom ops as a GPU runs it: its CUDA
        implementation on the meta tensors (:func:`kernel_path_on_meta`),
        each Triton launch a kernel that moves its tensor arguments once
        (``<op>/<kernel>``; the op's FLOPs on its first), and each aten op
        of the implementation recorded as it comes."""
        from torch._library.custom_ops import _maybe_get_opdef
        name = str(func.name())
        formula = flop_registry.get(func._overloadpacket)
        # FLOPs from the op's formula on what it returns (its fake).
        fake_out = func(*args, **kwargs)
        flops = formula(*args, **kwargs, out_val=fake_out) if formula else 0
        self._launching = [name, int(flops)]
        try:
            with self, kernel_path_on_meta(self):
                return _maybe_get_opdef(func)._init_fn(*args, **kwargs)
        finally:
            self._launching = None

    def launch(self, kernel: str, tensors: Sequence[torch.Tensor]) -> None:
        """A Triton kernel launched by the op running in
        :meth:`_kernel_path`: its tensor arguments, each storage once (a
        placeholder passed for an absent input is another argument's)."""
        name, flops = self._launching
        spans = {_storage_key(t): t for t in tensors}
        self.ops.append(OpRecord(f'{name}/{kernel}', flops,
                                 sum(map(tensor_bytes, spans.values())),
                                 self.phase))
        self._launching[1] = 0  # the op's FLOPs on its first launch only


#: The package's modules whose custom ops choose the kernel path
#: (``kernels_run_on``) and those that hold the Triton kernels.
OP_MODULES = ('linear_attention', 'mean_shift_attention', 'score_conv',
              'softmax_apply', 'diagonality_loss')
KERNEL_MODULES = tuple('triton_' + name for name in OP_MODULES)


class _Launch:
    """A Triton kernel's stand-in: ``kernel[grid](*args)`` tells the
    recorder which tensors the launch was given, and runs nothing."""

    def __init__(self, recorder: 'StepRecorder', name: str):
        self.recorder, self.name = recorder, name

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.recorder.launch(self.name, list(_tensors((args, kwargs))))
        return launch


@contextlib.contextmanager
def kernel_path_on_meta(recorder: 'StepRecorder') -> Iterator[None]:
    """The custom ops' kernel path (their CUDA implementation) taken on
    meta tensors, every Triton kernel of :data:`KERNEL_MODULES` replaced
    by a :class:`_Launch` into ``recorder``; all restored after."""
    import importlib
    from triton.runtime.jit import KernelInterface  # compiled or interpreted
    patches = []
    for name in OP_MODULES:
        module = importlib.import_module('vitattn_mm.ops.' + name)
        patches.append((module, 'kernels_run_on', lambda device: True))
    for name in KERNEL_MODULES:
        module = importlib.import_module('vitattn_mm.ops.' + name)
        patches += [(module, attr, _Launch(recorder, attr))
                    for attr, value in vars(module).items()
                    if isinstance(value, KernelInterface)]
    saved = [(module, attr, getattr(module, attr))
             for module, attr, _ in patches]
    try:
        for module, attr, value in patches:
            setattr(module, attr, value)
        yield
    finally:
        for module, attr, value in saved:
            setattr(module, attr, value)


class SavedActivations:
    """The bytes autograd keeps for the backward of what runs inside it
    (``torch.autograd.graph.saved_tensors_hooks``): each saved tensor's
    storage once, so that views of one tensor and a tensor saved by
    several ops count once, and the whole storage (a saved slice keeps
    all of it alive); the storages of ``model``'s parameters and buffers
    are left out (they are held whatever the step keeps).

    Args:
        model (nn.Module): The model whose weights are not activations.
    """

    def __init__(self, model: nn.Module):
        self._weights = {_storage_key(t) for t in (*model.parameters(),
                                                   *model.buffers())}
        self._sizes: Dict[int, int] = {}
        self._hooks = torch.autograd.graph.saved_tensors_hooks(
            self._pack, lambda t: t)

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        key = _storage_key(t)
        if key not in self._weights:
            self._sizes[key] = t.untyped_storage().nbytes()
        return t

    @property
    def nbytes(self) -> int:
        return sum(self._sizes.values())

    def __enter__(self) -> 'SavedActivations':
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)


#: A training step's peak on the GPU, from what the cost model counts:
#: 16 bytes a parameter (AdamW: the fp32 weight, its gradient, two
#: moments) plus the saved activations times 1.07 (the allocator's
#: blocks and the backward's transient maps): :func:`fit_peak` over the
#: 24 bf16 steps of the kept H200 runs (eager and fused, both sizes;
#: each within 6%; ``benchmarks/calibrate.py`` refits it).
PEAK_BYTES_PER_PARAMETER = 16
PEAK_PER_SAVED_BYTE = 1.07
#: Beside the CSVs of a run whose rows predate their ``parameters`` and
#: ``saved_mib`` columns: each step's parameter count and saved bytes by
#: :func:`step_name`, recorded from the commit the run measured.
MEMORY_FILE = 'memory.json'


def projected_peak_mib(parameters: int, saved_bytes: int,
                       per_saved_byte: float = PEAK_PER_SAVED_BYTE
                       ) -> float:
    """A training step's projected peak memory (MiB) on the GPU, from the
    model's parameter count and what its forward keeps
    (:class:`SavedActivations`)."""
    return (PEAK_BYTES_PER_PARAMETER * parameters +
            per_saved_byte * saved_bytes) / 2**20


def fit_peak(samples: Sequence[Tuple[int, int, float]]
             ) -> Tuple[float, float]:
    """The factor on the saved bytes that best projects measured peaks:
    ``samples`` are ``(parameters, saved bytes, measured peak MiB)``; the
    least-squares fit of ``peak - weights = factor x saved``. Returns the
    factor and the largest relative error of a projection with it."""
    excess = [(peak - projected_peak_mib(params, 0), saved / 2**20)
              for params, saved, peak in samples]
    factor = sum(e * s for e, s in excess) / sum(s * s for _, s in excess)
    error = max(abs(projected_peak_mib(params, saved, factor) / peak - 1)
                for params, saved, peak in samples)
    return factor, error


def _storage_key(t: torch.Tensor) -> int:
    """The identity of ``t``'s storage (a meta storage has no address)."""
    return t.untyped_storage()._cdata


def tally(ops: Sequence[OpRecord]) -> List[list]:
    """A step's ops as ``[name, flops, bytes, count]`` rows (identical
    kernels counted once): what a GPU run keeps beside its timings, so
    that a later fit compares each measured time with the step that ran,
    not with what the code has become since."""
    counts: Dict[Tuple[str, int, int], int] = defaultdict(int)
    for r in ops:
        counts[(r.name, r.flops, r.nbytes)] += 1
    return [[*key, n] for key, n in sorted(counts.items())]


#: Where a GPU run keeps its projected steps, beside its CSVs: a
#: :func:`tally` per :func:`step_name`.
STEPS_FILE = 'steps.json'


def step_name(model: str, height: int, width: int,
              backend: Optional[str], launched: bool = False) -> str:
    """A step's name in :data:`STEPS_FILE`: the model, the input and
    whether its attentions ran fused ('triton') or eager (anything else);
    ``launched``: a fused step recorded as launched (:func:`record_step`),
    kept beside its default record."""
    fused = 'triton' if backend == 'triton' else ''
    return f'{model}|{height}x{width}|{fused}' + (
        '|launched' if launched and fused else '')


def untally(rows: Sequence[Sequence]) -> List[OpRecord]:
    """The ops of a :func:`tally` (their phases are not kept)."""
    return [OpRecord(name, int(flops), int(nbytes), 'step')
            for name, flops, nbytes, n in rows for _ in range(int(n))]


# ------------------------------------------- SDPA as the GPU's fused kernel


@torch.library.custom_op('vitattn_cost::fused_attention', mutates_args=())
def fused_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    bias: Optional[torch.Tensor],
                    scale: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """Stands for the GPU's fused SDPA kernel; shapes only (meta)."""
    raise RuntimeError('vitattn_cost::fused_attention only records shapes '
                       'on the meta device')


@fused_attention.register_fake
def _(q, k, v, bias, scale):
    out = q.new_empty(*q.shape[:-1], v.shape[-1])
    return out, q.new_empty(q.shape[:-1], dtype=torch.float32)


@torch.library.custom_op('vitattn_cost::fused_attention_backward',
                         mutates_args=())
def fused_attention_backward(
        grad: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
        v: torch.Tensor, bias: Optional[torch.Tensor], out: torch.Tensor,
        lse: torch.Tensor, scale: float, bias_grad: bool
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    raise RuntimeError('shapes only')


@fused_attention_backward.register_fake
def _(grad, q, k, v, bias, out, lse, scale, bias_grad):
    # The bias gradient is written at the logits' full size (torch's
    # memory-efficient backward); autograd then sums a broadcast one.
    dbias = q.new_empty(*q.shape[:-1], k.shape[-2]) if bias_grad else \
        q.new_empty(0)
    return (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v),
            dbias)


def _attention_setup(ctx, inputs, output):
    q, k, v, bias, scale = inputs
    ctx.save_for_backward(q, k, v, bias, *output)
    ctx.scale = scale
    ctx.bias_grad = bias is not None and bias.requires_grad


def _attention_backward(ctx, grad, _grad_lse):
    q, k, v, bias, out, lse = ctx.saved_tensors
    dq, dk, dv, dbias = fused_attention_backward(grad, q, k, v, bias, out,
                                                 lse, ctx.scale,
                                                 ctx.bias_grad)
    return dq, dk, dv, dbias if ctx.bias_grad else None, None


fused_attention.register_autograd(_attention_backward,
                                  setup_context=_attention_setup)


def _shape_flops(count):
    def formula(q, k, v, *args, out_val=None, **kwargs):
        return count(q.shape, k.shape, v.shape)
    return formula


flop_registry[torch.ops.vitattn_cost.fused_attention] = _shape_flops(
    sdpa_flop_count)
flop_registry[torch.ops.vitattn_cost.fused_attention_backward] = (
    lambda grad, q, k, v, *args, out_val=None, **kwargs:
    sdpa_backward_flop_count(grad.shape, q.shape, k.shape, v.shape))

#: The alignment of a float mask's rows that the memory-efficient kernel
#: reads without padding it first (elements).
MASK_ALIGNMENT = 16


def gpu_sdpa(q, k, v, attn_mask=None, dropout_p=0., is_causal=False,
             scale=None, enable_gqa=False):
    """``F.scaled_dot_product_attention`` as a GPU runs it (see the module
    docstring)."""
    if q.dim() != 4 or is_causal or enable_gqa:
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=dropout_p,
            is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
    scale = q.shape[-1]**-0.5 if scale is None else scale
    bias = attn_mask
    if bias is not None:
        if bias.dtype == torch.bool:
            bias = torch.zeros((), dtype=q.dtype, device=q.device).masked_fill(
                ~bias, float('-inf'))
        elif bias.dtype != q.dtype:
            bias = bias.to(q.dtype)
        if bias.dim() > 1 and bias.stride(-2) % MASK_ALIGNMENT:
            pad = -bias.shape[-1] % MASK_ALIGNMENT or MASK_ALIGNMENT
            bias = F.pad(bias, (0, pad))[..., :bias.shape[-1]]
        bias = bias.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    out, _ = fused_attention(q, k, v, bias, scale)
    return out


# ----------------------------------------------------- autocast emulation

#: CUDA autocast's lists, by the name a torch function has.
LOWER_PRECISION = {
    'linear', 'conv1d', 'conv2d', 'conv3d', 'conv_transpose1d',
    'conv_transpose2d', 'conv_transpose3d', 'matmul', '__matmul__',
    '__rmatmul__', 'bmm', 'mm', 'mv', 'baddbmm', 'addmm', 'addbmm',
    'einsum', 'prelu', 'scaled_dot_product_attention'
}
FULL_PRECISION = {
    'layer_norm', 'group_norm', 'pow', '__pow__', '__rpow__', 'norm', 'exp',
    'log', 'rsqrt', 'reciprocal', 'softplus', 'mse_loss', 'cross_entropy',
    'nll_loss', 'normalize', 'cosine_similarity', 'cdist', 'softmin'
}
#: CUDA's ``fp32_set_opt_dtype`` ops: not cast, run with ``dtype=float32``
#: unless the call gives a dtype (a sum reads bf16 and accumulates in
#: fp32 in one kernel; a softmax with ``dtype=`` its input's runs as it is).
FULL_PRECISION_OUTPUT = {
    'softmax', 'log_softmax', 'sum', 'prod', 'cumsum', 'cumprod',
    'linalg_vector_norm', 'linalg_matrix_norm'
}


class MetaAutocast(TorchFunctionMode):
    """CUDA's autocast policy on meta tensors, while the CPU's autocast
    flag is on (``torch.autocast('cpu', dtype)``), and SDPA as the GPU's
    fused kernel (:func:`gpu_sdpa`) always."""

    def __init__(self):
        super().__init__()
        self._cache: Dict[int, torch.Tensor] = {}

    def _cast(self, tree, dtype):
        if isinstance(tree, (list, tuple)):
            return type(tree)(self._cast(t, dtype) for t in tree)
        if not isinstance(tree, torch.Tensor) or \
                not tree.is_floating_point() or tree.dtype == dtype:
            return tree
        if tree.is_leaf and tree.requires_grad:  # a parameter: cached
            key = (id(tree), dtype)
            if key not in self._cache:
                self._cache[key] = tree.to(dtype)
            return self._cache[key]
        return tree.to(dtype)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, '__name__', '')
        if torch.is_autocast_enabled('cpu'):
            if name in LOWER_PRECISION:
                dtype = torch.get_autocast_dtype('cpu')
                args, kwargs = self._cast(args, dtype), {
                    k: self._cast(v, dtype) for k, v in kwargs.items()}
            elif name in FULL_PRECISION:
                args = self._cast(args, torch.float32)
            elif name in FULL_PRECISION_OUTPUT and args and \
                    isinstance(args[0], torch.Tensor) and \
                    args[0].dtype in (torch.float16, torch.bfloat16) and \
                    kwargs.get('dtype') is None:
                kwargs = dict(kwargs, dtype=torch.float32)
        else:
            self._cache.clear()
        if func is F.scaled_dot_product_attention:
            return gpu_sdpa(*args, **kwargs)
        return func(*args, **kwargs)


# ----------------------------------------------------------- one step


def build_on_meta(cfg: dict) -> nn.Module:
    """A backbone from a registry config, on the meta device."""
    from mmengine.registry import MODELS, init_default_scope
    from vitattn_tools.meta import on_meta_device
    import vitattn_mm  # noqa: F401  (registers the classes)
    init_default_scope('mmdet')
    with on_meta_device():
        model = MODELS.build(dict(cfg))
    return model


def record_step(model: nn.Module, shape: Shape, batch: int = 2,
                dtype: Optional[torch.dtype] = torch.bfloat16,
                activations: Optional[SavedActivations] = None,
                launches: bool = False) -> List[OpRecord]:
    """Every kernel of one training step of ``model`` (on the meta device)
    at ``batch`` images of ``shape``: forward under autocast to ``dtype``
    (None: fp32), backward of the outputs' means plus auxiliary losses.
    Given ``activations`` (a :class:`SavedActivations` of ``model``), the
    forward runs inside it, which counts what it keeps. With ``launches``
    the package's custom ops are recorded as a GPU runs them (their
    kernels' launches and the aten ops around them,
    :meth:`StepRecorder._kernel_path`), not as one op each way."""
    model.train()
    # From no gradients, as after zero_grad(set_to_none=True): a model
    # recorded again records the same step (no gradients to add into).
    for p in model.parameters():
        p.grad = None
    image = torch.empty(batch, 3, *shape, device='meta')
    recorder = StepRecorder(launches)
    autocast = torch.autocast('cpu', dtype=dtype) if dtype else \
        contextlib.nullcontext()
    with recorder, MetaAutocast():
        with autocast, activations or contextlib.nullcontext():
            outs = model(image)
            if isinstance(outs, torch.Tensor):
                outs = (outs, )
            loss = sum(o.float().mean() for o in outs)
            pop = getattr(model, 'pop_aux_losses', None)
            for aux in (pop() if pop else {}).values():
                loss = loss + aux
        recorder.phase = 'backward'
        loss.backward()
    return recorder.ops


@dataclass
class Projection:
    """The projected cost of one step."""
    ops: int
    gflop: float
    gbytes: float
    kernel_ms: float
    dispatch_ms: float
    top: List[Tuple[str, float, int]] = field(default_factory=list)
    #: GB kept for the backward (:class:`SavedActivations`); None where
    #: the step was recorded without counting them.
    saved_gb: Optional[float] = None

    @property
    def ms(self) -> float:
        """Kernels and eager dispatch overlap: the larger one."""
        return max(self.kernel_ms, self.dispatch_ms)


def project(records: Sequence[OpRecord], hardware: Hardware = Hardware(),
            top: int = 5) -> Projection:
    """The step's projected time and totals, with the ``top`` op names by
    time: ``(name, ms, count)``."""
    by_name: Dict[str, List[float]] = defaultdict(lambda: [0., 0])
    kernel_us = 0.
    for r in records:
        us = hardware.kernel_us(r.flops, r.nbytes, is_fused(r.name))
        kernel_us += us
        entry = by_name[f'{r.name} ({r.phase[:3]})']
        entry[0] += us / 1e3
        entry[1] += 1
    ranked = sorted(by_name.items(), key=lambda item: -item[1][0])[:top]
    return Projection(
        ops=len(records),
        gflop=sum(r.flops for r in records) / 1e9,
        gbytes=sum(r.nbytes for r in records) / 1e9,
        kernel_ms=kernel_us / 1e3,
        dispatch_ms=len(records) * hardware.dispatch_us / 1e3,
        top=[(name, ms, int(n)) for name, (ms, n) in ranked])


# ----------------------------------------------------------- calibration

#: The grid :func:`calibrate` searches.
#: (The first GPU run's fit sat on the lower edges of a grid that started
#: at 0.15 / 0.2 / 2 us, so it reaches further down, and up for dispatch.)
CALIBRATION_GRID = dict(
    mfu=(0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6,
         0.7, 0.8, 0.9),
    bandwidth_efficiency=(0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                          0.6, 0.7, 0.8, 0.9, 1.0),
    dispatch_us=(2., 3., 4., 6., 8., 12., 16., 24., 32., 48., 64., 96.),
    fused_efficiency=(0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2,
                      0.3, 0.5, 0.75, 1.0))


def calibrate(samples: Sequence[Tuple[Sequence[OpRecord], float]],
              hardware: Hardware = Hardware()) -> Tuple[Hardware, float]:
    """The MFU, bandwidth efficiency, dispatch cost and (where a step ran
    custom ops) fused efficiency that best project measured steps:
    ``samples`` are ``(ops of a step, measured ms)``; the fit minimises the
    squared log error of the projected step times over
    :data:`CALIBRATION_GRID` (peak, bandwidth and kernel floor kept; the
    fused efficiency stays ``hardware``'s when no step ran a custom op).
    Returns the fitted hardware and its RMS log error."""
    import numpy as np
    flops = [np.array([r.flops for r in ops], float) for ops, _ in samples]
    nbytes = [np.array([r.nbytes for r in ops], float) for ops, _ in samples]
    fused = [np.array([is_fused(r.name) for r in ops]) for ops, _ in samples]
    counts = np.array([len(f) for f in flops], float)
    measured = np.log([ms for _, ms in samples])
    fused_grid = CALIBRATION_GRID['fused_efficiency'] if any(
        f.any() for f in fused) else (hardware.fused_efficiency,)
    best = (math.inf, hardware)
    for mfu in CALIBRATION_GRID['mfu']:
        for eff in CALIBRATION_GRID['bandwidth_efficiency']:
            compute = 1e6 / (hardware.peak_tflops * 1e12 * mfu)
            memory = 1e6 / (hardware.bandwidth_tbs * 1e12 * eff)
            us = [np.maximum(np.maximum(f * compute, b * memory),
                             hardware.min_kernel_us)
                  for f, b in zip(flops, nbytes)]
            aten_ms = np.array([u[~m].sum() / 1e3 for u, m in zip(us, fused)])
            fused_ms = np.array([u[m].sum() / 1e3 for u, m in zip(us, fused)])
            for fused_eff in fused_grid:
                kernels = aten_ms + fused_ms / fused_eff
                for dispatch in CALIBRATION_GRID['dispatch_us']:
                    projected = np.log(np.maximum(kernels,
                                                  counts * dispatch / 1e3))
                    error = float(np.sqrt(np.mean((projected - measured)**2)))
                    if error < best[0]:
                        best = (error, replace(
                            hardware, mfu=mfu, bandwidth_efficiency=eff,
                            dispatch_us=dispatch,
                            fused_efficiency=fused_eff))
    return best[1], best[0]


# ----------------------------------------------------------- the models


@dataclass(frozen=True)
class Row:
    """A family's model and what it is held against.

    Args:
        label (str): Name in the table.
        cfg (dict): Registry config of the backbone.
        stock (str, optional): Label of the stock OpenMMLab class.
        skeleton (str, optional): Label of this project's softmax skeleton
            of the same arch.
    """
    label: str
    cfg: dict
    stock: Optional[str] = None
    skeleton: Optional[str] = None


#: Stock classes and the project's softmax skeletons.
BASELINES: Dict[str, dict] = {
    'mmdet Swin-T': dict(type='mmdet.SwinTransformer'),
    'mmdet PVT-T': dict(type='mmdet.PyramidVisionTransformer',
                        num_layers=[2, 2, 2, 2]),
    'mmdet PVT-S': dict(type='mmdet.PyramidVisionTransformer',
                        num_layers=[3, 4, 6, 3]),
    'mmdet PVTv2-B0': dict(type='mmdet.PyramidVisionTransformerV2',
                           embed_dims=32, num_layers=[2, 2, 2, 2]),
    'AttnSwin-T': dict(type='AttnSwinTransformer', arch='tiny'),
    'AttnPVT-T': dict(type='AttnPVT', arch='tiny'),
    'AttnPVT-S': dict(type='AttnPVT', arch='small'),
    'AttnPVTv2-B0': dict(type='AttnPVTv2', arch='b0'),
    'AttnCSwin-T': dict(type='AttnCSwinTransformer', arch='tiny'),
}

ROWS: List[Row] = [
    Row('FLatten-Swin-T', dict(type='FLattenSwinTransformer', arch='tiny'),
        'mmdet Swin-T', 'AttnSwin-T'),
    Row('MSF-Swin-T', dict(type='MSFSwinTransformer', arch='tiny'),
        'mmdet Swin-T', 'AttnSwin-T'),
    Row('LessAttn-Swin-T', dict(type='LessAttnSwinTransformer',
                                arch='tiny'), 'mmdet Swin-T', 'AttnSwin-T'),
    Row('L2ViT-T', dict(type='L2ViT', arch='tiny'), 'mmdet Swin-T',
        'AttnSwin-T'),
    Row('LaViT-S', dict(type='LaViT', arch='small'), 'mmdet PVT-S',
        'AttnPVT-S'),
    Row('FLatten-PVT-T', dict(type='FLattenPVT', arch='tiny'),
        'mmdet PVT-T', 'AttnPVT-T'),
    Row('FLatten-PVTv2-B0', dict(type='FLattenPVTv2', arch='b0'),
        'mmdet PVTv2-B0', 'AttnPVTv2-B0'),
    Row('FLatten-CSwin-T', dict(type='FLattenCSwinTransformer',
                                arch='tiny'), None, 'AttnCSwin-T'),
]


def with_backend(cfg: dict, backend: Optional[str]) -> dict:
    """``cfg`` with ``attn_backend`` set (families only)."""
    return cfg if backend is None else dict(cfg, attn_backend=backend)


def measure(cfg: dict, shape: Shape, hardware: Hardware, top: int,
            dtype: Optional[torch.dtype] = torch.bfloat16,
            launches: bool = False) -> Projection:
    """Build ``cfg`` on the meta device, record a step, project it (with
    the GB its forward keeps for the backward)."""
    model = build_on_meta(cfg)
    saved = SavedActivations(model)
    proj = project(record_step(model, shape, dtype=dtype, activations=saved,
                               launches=launches), hardware, top)
    return replace(proj, saved_gb=saved.nbytes / 1e9)


def _ratio(a: float, b: Optional[float]) -> str:
    return '' if not b else f'{a / b:.2f}'


def table(rows: Sequence[Row], shape: Shape, hardware: Hardware,
          backend: Optional[str] = None, top: int = 3,
          dtype: Optional[torch.dtype] = torch.bfloat16,
          launches: bool = False) -> str:
    """The markdown table of ``rows`` at ``shape``: every family with its
    stock class and softmax skeleton, and each family's top ops (with
    ``launches``, the fused ops as a GPU runs them: :func:`record_step`)."""
    cache: Dict[str, Projection] = {}

    def baseline(label):
        if label and label not in cache:
            cache[label] = measure(BASELINES[label], shape, hardware, top,
                                   dtype)
        return cache.get(label)

    lines = [
        f'### {shape[0]}x{shape[1]}, batch 2'
        + (f', attn_backend={backend!r}' if backend else '')
        + (', fused ops as launched' if launches else ''), '',
        '| model | GFLOP | GB moved | ops | projected ms | vs stock | '
        'vs skeleton | ops vs skeleton | GB saved | saved vs skeleton |',
        '|' + ' --- |' * 10
    ]
    notes = []
    for row in rows:
        # A baseline asked for alone has no attention backend to set.
        cfg = row.cfg if row.label in BASELINES else with_backend(row.cfg,
                                                                  backend)
        proj = measure(cfg, shape, hardware, top, dtype, launches)
        stock, skeleton = baseline(row.stock), baseline(row.skeleton)
        lines.append(
            f'| {row.label} | {proj.gflop:.0f} | {proj.gbytes:.1f} | '
            f'{proj.ops} | {proj.ms:.1f} | '
            f'{_ratio(proj.ms, stock and stock.ms)} | '
            f'{_ratio(proj.ms, skeleton and skeleton.ms)} | '
            f'{_ratio(proj.ops, skeleton and skeleton.ops)} | '
            f'{proj.saved_gb:.2f} | '
            f'{_ratio(proj.saved_gb, skeleton and skeleton.saved_gb)} |')
        notes.append(f'* {row.label}: ' + '; '.join(
            f'{name} {ms:.2f} ms x{n}' for name, ms, n in proj.top))
    for label in sorted(cache, key=list(BASELINES).index):
        proj = cache[label]
        lines.append(f'| {label} | {proj.gflop:.0f} | {proj.gbytes:.1f} | '
                     f'{proj.ops} | {proj.ms:.1f} | | | | '
                     f'{proj.saved_gb:.2f} | |')
    return '\n'.join(lines + [
        '', 'GB saved: the activations the forward keeps for the backward '
        '(each storage once; weights left out).', '',
        f'Top {top} ops by projected time:'] + notes) + '\n'


def parse_shape(text: str) -> Shape:
    h, w = text.lower().split('x')
    return int(h), int(w)


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split('\n\n')[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--sizes', nargs='+', type=parse_shape,
                        default=[(800, 1280), (512, 2048)])
    parser.add_argument('--models', nargs='+', default=None,
                        help='labels of ROWS or of BASELINES (default: '
                        'every row)')
    parser.add_argument('--backend', choices=('eager', 'triton'),
                        default=None, help="the families' attn_backend "
                        '(default: their own default)')
    parser.add_argument('--dtype', choices=('bf16', 'fp16', 'fp32'),
                        default='bf16')
    parser.add_argument('--top', type=int, default=3)
    parser.add_argument('--launches', action='store_true',
                        help="the package's fused ops as a GPU runs them: "
                        'each Triton launch a kernel moving its tensor '
                        'arguments once, and the aten ops of their CUDA '
                        'implementation (default: each custom op one '
                        'kernel each way, its inputs and outputs once)')
    parser.add_argument('--hardware', choices=sorted(HARDWARE),
                        default='h100-roofline',
                        help='named parameter set; the options below '
                        'override its values')
    for name in Hardware().__dict__:
        parser.add_argument('--' + name.replace('_', '-'), type=float,
                            default=None)
    args = parser.parse_args(argv)
    preset = HARDWARE[args.hardware]
    hardware = Hardware(**{
        name: getattr(preset, name) if getattr(args, name) is None else
        getattr(args, name) for name in Hardware().__dict__})
    dtype = dict(bf16=torch.bfloat16, fp16=torch.float16,
                 fp32=None)[args.dtype]
    rows = ROWS
    if args.models:
        known = {row.label.lower(): row for row in ROWS}
        known.update((label.lower(), Row(label, cfg))
                     for label, cfg in BASELINES.items())
        unknown = [m for m in args.models if m.lower() not in known]
        if unknown:
            parser.error(f'unknown models {unknown}; known: '
                         f'{[row.label for row in known.values()]}')
        rows = [known[m.lower()] for m in args.models]
    print(f'Projected training step ({hardware})\n')
    for shape in args.sizes:
        print(table(rows, shape, hardware, args.backend, args.top, dtype,
                    args.launches))


if __name__ == '__main__':
    sys.path.insert(0, osp.join(osp.dirname(osp.dirname(
        osp.abspath(__file__))), 'tools'))
    main()
