"""Compile every Triton kernel the fused ops launch for a CUDA target, on a
machine without a GPU.

Triton's interpreter (``TRITON_INTERPRET=1``, the tests' way of checking the
kernels' numerics on the CPU) runs the kernels' Python, not Triton's
compiler: a kernel can pass every interpreted test and still fail to compile
(the first GPU run met a loop-carried variable whose type changed in a loop).
This module closes that gap: it runs each family's training step on the CPU
with the ops' kernel path forced, and, instead of launching a kernel, hands
its source and specialization (argument dtypes, the ``tl.constexpr``
values, ``num_warps``) to ``triton.compile`` for a GPU target (default
``sm_90``, an H100 / H200). Triton's front end, its MLIR passes and the
bundled ``ptxas`` all run here; the outputs of the step are garbage (nothing
runs), which a compile check does not read.

It must run in a process where ``TRITON_INTERPRET`` is unset: with it set,
``@triton.jit`` makes interpreter objects that the compiler does not take.
"""
import contextlib
import inspect
import math
import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import torch

# A backbone per family with fused ops, at its paper arch (the heads, head
# widths and window sizes a user trains), a small input it accepts, and
# other arguments where a family launches other kernels with them.
FAMILIES: List[Tuple[str, str, Tuple[int, int], dict]] = [
    ('FLattenSwinTransformer', 'tiny', (64, 64), {}),
    ('FLattenPVT', 'tiny', (64, 64), {}),
    ('FLattenPVTv2', 'b0', (64, 64), {}),
    ('FLattenCSwinTransformer', 'tiny', (64, 64), {}),
    ('FLattenDeiT', 'tiny', (64, 64), {}),
    ('L2ViT', 'tiny', (64, 64), {}),
    ('MSFSwinTransformer', 'tiny', (64, 64), {}),
    ('MSFViT', 'small', (64, 64), {}),
    ('LaViT', 'small', (64, 64), {}),
    # With attention dropout LaViT's softmax runs eagerly and its DP loss
    # is the pooled op's own, forward and backward (without, the fused
    # softmax computes the loss).
    ('LaViT', 'small', (64, 64), dict(attn_drop_rate=0.1)),
    ('LessAttnSwinTransformer', 'tiny', (64, 64), {}),
]
PRECISIONS = {'fp32': None, 'bf16': torch.bfloat16, 'fp16': torch.float16}
_DTYPES = {torch.float32: 'fp32', torch.bfloat16: 'bf16',
           torch.float16: 'fp16', torch.float64: 'fp64',
           torch.int32: 'i32', torch.int64: 'i64', torch.int8: 'i8',
           torch.uint8: 'u8', torch.bool: 'i1'}
# Hopper's largest shared memory a block can opt into (227 KiB).
SHARED_LIMIT = {90: 232448, 80: 166912, 89: 101376, 86: 101376}
# What one SM holds at once (sm_80 and sm_90): registers, shared memory
# (bytes, for all its blocks), warps and blocks.
SM_REGISTERS, SM_WARPS, SM_BLOCKS = 65536, 64, 32
SM_SHARED = {90: 233472, 80: 167936, 89: 102400, 86: 102400}


def resident_warps(registers: int, shared: int, num_warps: int,
                   capability: int = 90) -> int:
    """Warps of a kernel one SM holds at once (occupancy, of 64): as many
    blocks as its registers allow (a warp's allocated 256 at a time), its
    shared memory (plus the 1 KiB the runtime keeps per block), and the
    SM's warp and block limits, times ``num_warps``."""
    per_warp = -(-max(registers, 1) * 32 // 256) * 256
    blocks = min(SM_REGISTERS // per_warp // num_warps,
                 SM_WARPS // num_warps, SM_BLOCKS)
    if shared:
        blocks = min(blocks, SM_SHARED.get(capability, SM_SHARED[90]) //
                     (shared + 1024))
    return blocks * num_warps


@dataclass
class Compiled:
    """One specialization of one kernel, compiled (or not)."""
    kernel: str
    signature: str
    seconds: float = 0.
    shared: Optional[int] = None
    registers: Optional[int] = None
    stack: Optional[int] = None
    #: Warps an SM holds at once (:func:`resident_warps`).
    warps_per_sm: Optional[int] = None
    #: The fewest and most programs (grid size) of its launches.
    programs: Tuple[int, int] = (0, 0)
    error: str = ''
    used_by: List[str] = field(default_factory=list)


def _signature(fn, args, kwargs) -> Tuple[Dict[str, str], Dict[str, object],
                                          Dict[str, object]]:
    """Triton's argument types, the constexpr values and the launch options
    (``num_warps`` ...) of one launch ``fn[grid](*args, **kwargs)``."""
    params = list(inspect.signature(fn.fn).parameters)
    options = {k: kwargs.pop(k) for k in list(kwargs)
               if k not in params}
    bound = dict(zip(params, args))
    bound.update(kwargs)
    constexprs = {p.name for p in fn.params if p.is_constexpr}
    signature, values = {}, {}
    for name in params:
        value = bound[name]
        if name in constexprs or value is None:
            signature[name], values[name] = 'constexpr', value
        elif isinstance(value, torch.Tensor):
            signature[name] = '*' + _DTYPES[value.dtype]
        elif isinstance(value, bool):
            signature[name] = 'i1'
        elif isinstance(value, int):
            signature[name] = 'i32' if -2**31 <= value < 2**31 else 'i64'
        elif isinstance(value, float):
            signature[name] = 'fp32'
        else:
            raise TypeError(f'{fn.fn.__name__}: argument {name} of type '
                            f'{type(value).__name__}')
    return signature, values, options


def _resources(cubin: bytes) -> Tuple[Optional[int], Optional[int]]:
    """Registers per thread and the stack frame in bytes (local memory:
    spills, or arrays indexed at run time), read by the ``cuobjdump`` Triton
    ships (None where it is missing)."""
    import triton
    tool = os.path.join(os.path.dirname(triton.__file__), 'backends',
                        'nvidia', 'bin', 'cuobjdump')
    if not os.path.exists(tool):
        return None, None
    with tempfile.NamedTemporaryFile(suffix='.cubin') as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, '--dump-resource-usage', f.name],
                             capture_output=True, text=True).stdout
    regs = re.search(r'REG:(\d+)', out)
    stack = re.search(r'STACK:(\d+)', out)
    return (int(regs.group(1)) if regs else None,
            int(stack.group(1)) if stack else None)


class KernelCompiler:
    """Collects the kernels' launches and compiles each specialization once.

    Args:
        capability (int): The target's compute capability (90: Hopper).
            Default: 90.
        warp_size (int): Default: 32.
    """

    def __init__(self, capability: int = 90, warp_size: int = 32):
        self.capability = capability
        self.warp_size = warp_size
        self.results: Dict[Tuple[str, str], Compiled] = {}
        self.current = ''

    def compile(self, fn, args, kwargs, grid=()) -> Compiled:
        """Compile one launch's specialization (once), and count its
        ``grid``'s programs."""
        result = self._compile(fn, args, kwargs)
        programs = math.prod(grid(kwargs) if callable(grid) else grid)
        low, high = result.programs
        result.programs = (min(low, programs) if low else programs,
                           max(high, programs))
        return result

    def _compile(self, fn, args, kwargs) -> Compiled:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        signature, values, options = _signature(fn, args, dict(kwargs))
        described = ', '.join(
            f'{k}={values[k]}' if t == 'constexpr' else f'{k}:{t}'
            for k, t in signature.items()
            if t == 'constexpr' or t.startswith('*'))
        if options:
            described += ', ' + ', '.join(f'{k}={v}'
                                          for k, v in options.items())
        key = (fn.fn.__module__.rsplit('.', 1)[-1] + '.' + fn.fn.__name__,
               described)
        if key in self.results:
            self.results[key].used_by.append(self.current)
            return self.results[key]
        result = Compiled(*key, used_by=[self.current])
        start = time.perf_counter()
        try:
            compiled = triton.compile(
                ASTSource(fn, signature=signature, constexprs=values),
                target=GPUTarget('cuda', self.capability, self.warp_size),
                options=options)
            result.shared = compiled.metadata.shared
            result.registers, result.stack = _resources(
                compiled.asm['cubin'])
            if result.registers is not None:
                result.warps_per_sm = resident_warps(
                    result.registers, result.shared,
                    options.get('num_warps', 4), self.capability)
            limit = SHARED_LIMIT.get(self.capability)
            if limit is not None and result.shared > limit:
                result.error = (f'needs {result.shared} B of shared memory, '
                                f'sm_{self.capability} has {limit}')
        except Exception as error:  # noqa: BLE001 (recorded, not raised)
            # Triton's CompilationError: where, the source, then the cause.
            lines = str(error).strip().splitlines() or ['']
            result.error = f'{type(error).__name__}: {lines[-1][:400]}' + (
                f' [{lines[0]}]' if len(lines) > 1 else '')
        result.seconds = time.perf_counter() - start
        self.results[key] = result
        return result

    @contextlib.contextmanager
    def capturing(self) -> Iterator['KernelCompiler']:
        """Every ``kernel[grid](...)`` launch compiles instead of running;
        the ops take their kernel path for CPU tensors."""
        import triton.runtime.jit as jit

        from vitattn_mm.ops import backend
        if backend.interpreting():
            raise RuntimeError('compile the kernels in a process without '
                               'TRITON_INTERPRET (the interpreter replaces '
                               "Triton's compiler)")
        run = jit.JITFunction.run

        def compile_instead(fn, *args, grid, warmup, **kwargs):
            self.compile(fn, args, kwargs, grid)

        jit.JITFunction.run = compile_instead
        try:
            with backend.kernel_path_forced():
                yield self
        finally:
            jit.JITFunction.run = run


def training_step(name: str, arch: str, hw: Tuple[int, int],
                  dtype: Optional[torch.dtype],
                  kwargs: Optional[dict] = None) -> None:
    """One forward and backward of backbone ``name`` (attn_backend='triton',
    and ``kwargs``) on the CPU, under autocast to ``dtype`` (None:
    fp32)."""
    import vitattn_mm.models.backbones as backbones
    model = getattr(backbones, name)(arch=arch, attn_backend='triton',
                                     **(kwargs or {})).train()
    image = torch.randn(2, 3, *hw)
    with torch.autocast('cpu', dtype=dtype or torch.bfloat16,
                        enabled=dtype is not None):
        outs = model(image)
        aux = getattr(model, 'pop_aux_losses', dict)().values()
    loss = sum(o.float().mean() for o in outs) + sum(
        a.float() for a in aux)
    loss.backward()


def compile_all(families=FAMILIES, precisions=PRECISIONS,
                capability: int = 90,
                progress: Callable[[str], None] = lambda _: None
                ) -> List[Compiled]:
    """Each family's kernels at each precision, compiled for
    ``sm_{capability}``; the list of distinct specializations."""
    compiler = KernelCompiler(capability)
    with compiler.capturing():
        for name, arch, hw, kwargs in families:
            # The family's other arguments in its label: LaViT(attn_drop_
            # rate=0.1) bf16.
            given = ', '.join(f'{k}={v}' for k, v in kwargs.items())
            for label, dtype in precisions.items():
                compiler.current = f'{name}({given}) {label}' if given \
                    else f'{name} {label}'
                training_step(name, arch, hw, dtype, kwargs)
                progress(compiler.current)
    return list(compiler.results.values())


def _span(pair: Tuple[int, int]) -> str:
    low, high = pair
    return str(low) if low == high else f'{low}-{high}'


def markdown(results: List[Compiled]) -> str:
    """The results as a markdown table."""
    rows = ['| kernel | specialization | compile s | shared B | registers '
            '| stack B | warps / SM | programs | used by | error |',
            '|' + ' --- |' * 10]
    for r in results:
        used = sorted(set(r.used_by))
        rows.append(
            f'| {r.kernel} | {r.signature} | {r.seconds:.1f} | '
            f"{'' if r.shared is None else r.shared} | "
            f"{'' if r.registers is None else r.registers} | "
            f"{'' if r.stack is None else r.stack} | "
            f"{'' if r.warps_per_sm is None else r.warps_per_sm} | "
            f"{_span(r.programs)} | "
            f"{', '.join(used[:3])}{' ...' if len(used) > 3 else ''} | "
            f'{r.error} |')
    return '\n'.join(rows)
