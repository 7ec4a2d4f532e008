"""Compile every Triton kernel of the fused ops for a GPU, without a GPU.

Runs each family's training step on the CPU with the kernels' launches
turned into ``triton.compile`` calls for ``sm_<capability>`` (Triton's front
end, passes and bundled ptxas), at fp32, bf16 and fp16; prints one row per
distinct specialization: compile time, shared memory, registers, stack frame
(spills), the warps an SM holds of it, its launches' fewest and most
programs, and the error of any that fails. Exit status 1 if one fails. It
compiles with the Triton it imports: a venv with the GPU image's version
checks the kernels as that GPU builds them (docs/fused_attention.md).
Examples::

    python tools/compile_kernels.py                  # all families, sm_90
    python tools/compile_kernels.py --family LaViT --precision bf16
    python tools/compile_kernels.py --capability 80  # an A100
    python tools/compile_kernels.py --family LaViT --size 800 1280
    python tools/compile_kernels.py --family FLattenPVT \
        --set triton_linear_attention.NUM_WARPS=8 \
        --set triton_linear_attention.DOT_PRECISION=tf32x3
"""
import ast
import argparse
import os
import sys
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--family', action='append', default=[],
                        help='backbone class name (repeatable; default: all)')
    parser.add_argument('--precision', action='append', default=[],
                        choices=['fp32', 'bf16', 'fp16'],
                        help='default: all three')
    parser.add_argument('--capability', type=int, default=90,
                        help='compute capability (default: 90, Hopper)')
    parser.add_argument('--size', nargs=2, type=int, metavar=('H', 'W'),
                        help='input size instead of each family\'s small '
                        'one (the tiles grow with the maps: 800 1280 '
                        'compiles what a detector trains with)')
    parser.add_argument('--out', help='also write the table to this file')
    parser.add_argument('--set', action='append', default=[],
                        metavar='MODULE.NAME=VALUE',
                        help='a kernel module\'s launch setting for this '
                        'run, as the GPU suite\'s tuning sets it (e.g. '
                        'triton_linear_attention.NUM_WARPS=8)')
    args = parser.parse_args()
    if os.environ.get('TRITON_INTERPRET', '0') not in ('', '0'):
        sys.exit('unset TRITON_INTERPRET: the interpreter replaces the '
                 'compiler this tool runs')
    import vitattn_mm  # noqa: F401
    for setting in args.set:
        _apply_setting(parser, setting)
    from vitattn_tools.kernel_compile import (FAMILIES, PRECISIONS,
                                              compile_all, markdown)
    known = sorted({f[0] for f in FAMILIES})
    unknown = [f for f in args.family if f not in known]
    if unknown:
        sys.exit(f'unknown family {unknown}; valid: {known}')
    families = [(name, arch, tuple(args.size) if args.size else hw, kwargs)
                for name, arch, hw, kwargs in FAMILIES
                if not args.family or name in args.family]
    precisions = {k: v for k, v in PRECISIONS.items()
                  if not args.precision or k in args.precision}
    start = time.perf_counter()
    results = compile_all(families, precisions, args.capability,
                          progress=lambda what: print('compiled:', what,
                                                      flush=True))
    table = markdown(results)
    print(table)
    failed = [r for r in results if r.error]
    print(f'{len(results)} specializations for sm_{args.capability}, '
          f'{len(failed)} failed, {time.perf_counter() - start:.0f} s')
    if args.out:
        with open(args.out, 'w') as f:
            f.write(table + '\n')
    sys.exit(1 if failed else 0)


def _apply_setting(parser, setting: str):
    """Set a kernel module's launch setting from ``MODULE.NAME=VALUE`` (a
    Python literal, else the text); a module or setting that does not
    exist is an error."""
    from vitattn_mm.ops.backend import kernel_module
    target, _, text = setting.partition('=')
    module, _, name = target.rpartition('.')
    expected = (f'--set {setting}: expected MODULE.NAME=VALUE with a launch '
                f'setting of {module} (e.g. NUM_WARPS=8)')
    if not name or not text:
        parser.error(expected)
    try:
        ops = kernel_module(module, [name])
    except ImportError:
        parser.error(f'--set {setting}: no kernel module {module!r}')
    except AttributeError:
        parser.error(expected)
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = text
    setattr(ops, name, value)


if __name__ == '__main__':
    main()
