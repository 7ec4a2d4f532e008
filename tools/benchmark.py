"""Backbone latency, peak memory and images/s, side by side with a baseline.

Models are preset names (``--list``), config files (their backbone),
``Type[:arch]`` or JSON dicts. Examples::

    # FLatten-Swin-T vs mmdet's Swin-T at detection resolution
    python tools/benchmark.py flatten-swin-t --baseline swin-t --shape 800 1280
    # every family against its baseline (the docs/benchmarks.md table)
    python tools/benchmark.py --suite --shape 800 1280
    # resolution sweep: fitted scaling exponents, CSV and PNG plot
    python tools/benchmark.py flatten-swin-t swin-t vit-s --sweep 512 2048 --steps 4
    # torch.compile vs eager: compile time, graphs / recompiles over the
    # sizes, steady-state latency side by side
    python tools/benchmark.py msf-vit-s --compile --shape 224 320 --shape 256 384
    # the GPU figures of docs/benchmarks.md (forward, then training step)
    python tools/benchmark.py --suite --device cuda --amp --compile
    python tools/benchmark.py --suite --device cuda --amp --compile --train
"""
import argparse
import os
import os.path as osp
import platform
import re
import sys

import torch
from tqdm import tqdm

import vitattn_mm  # noqa: F401
from vitattn_mm.utils.compile import compile_backbone, compile_stats
from vitattn_tools.benchmark import (PRESETS, SUITE, build_backbone,
                                     fit_exponent, gemm_rate, measure,
                                     plot_sweep, preset_names, run_once,
                                     write_csv)
from vitattn_tools.flops import count_backbone_macs


def parse_args():
    parser = argparse.ArgumentParser(
        description='Measure backbone latency, peak memory and throughput')
    parser.add_argument('models', nargs='*', help='models to measure')
    parser.add_argument('--baseline', help='model the ratios refer to')
    parser.add_argument('--suite', action='store_true',
                        help='every family against its baseline')
    parser.add_argument('--shape', type=int, nargs=2, action='append',
                        metavar=('H', 'W'),
                        help='input size (repeatable); default 800 1280')
    parser.add_argument('--sweep', type=int, nargs=2, metavar=('MIN', 'MAX'),
                        help='square sizes from MIN to MAX (geometric)')
    parser.add_argument('--steps', type=int, default=4,
                        help='sizes in a sweep')
    parser.add_argument('--batch', type=int, default=1)
    parser.add_argument('--train', action='store_true',
                        help='time forward + backward instead of forward')
    parser.add_argument('--amp', action='store_true',
                        help='fp16 autocast on CUDA, bf16 on CPU')
    parser.add_argument('--warmup', type=int, default=2)
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--device', default='cuda'
                        if torch.cuda.is_available() else 'cpu')
    parser.add_argument('--threads', type=int,
                        help='torch intra-op threads on CPU')
    parser.add_argument('--out-dir', default='work_dirs/benchmark',
                        help='where CSV and PNG go')
    parser.add_argument('--compile', action='store_true',
                        help='also time each model under torch.compile '
                        '(dynamic shapes): compile time, graphs and '
                        'recompiles over the --shape sizes, latency ratio')
    parser.add_argument('--compile-backend', default='inductor',
                        help="dynamo backend: 'inductor' (default), "
                        "'aot_eager' or 'eager'")
    parser.add_argument('--compile-mode', help="inductor mode, e.g. "
                        "'max-autotune'")
    parser.add_argument('--gemm-share', action='store_true',
                        help='CPU: each model\'s multiply-adds per second '
                        'as a share of the machine\'s fp32 matmul rate (how '
                        'well its time turns into arithmetic)')
    parser.add_argument('--list', action='store_true',
                        help='list the preset names and exit')
    return parser.parse_args()


def machine() -> str:
    if torch.cuda.is_available():
        return f'{torch.cuda.get_device_name()} (CUDA {torch.version.cuda})'
    cpu = platform.processor() or platform.machine()
    try:  # the model name says more than the architecture
        with open('/proc/cpuinfo') as f:
            cpu = re.search(r'model name\s*:\s*(.+)', f.read()).group(1)
    except (OSError, AttributeError):
        pass
    return (f'{cpu} ({os.cpu_count()} cores), {torch.get_num_threads()} '
            f'threads, torch {torch.__version__}')


def report(results, baseline, unit_ms=True):
    base = results.get(baseline) if baseline else None
    header = (f'{"model":<26}{"median ms":>11}{"IQR ms":>9}{"img/s":>8}'
              f'{"peak MiB":>10}')
    if base:
        header += f'{"latency x":>11}{"memory x":>10}'
    lines = [header]
    for name, m in results.items():
        peak = m.peak_bytes / 2**20 if m.peak_bytes is not None else float(
            'nan')
        line = (f'{name:<26}{m.median * 1e3:>11.1f}{m.spread * 1e3:>9.1f}'
                f'{m.images_per_s:>8.2f}{peak:>10.0f}')
        if base:
            mem_ratio = (m.peak_bytes / base.peak_bytes
                         if m.peak_bytes and base.peak_bytes else float('nan'))
            line += f'{m.median / base.median:>11.2f}{mem_ratio:>10.2f}'
        lines.append(line)
    return '\n'.join(lines)


def gemm_share_report(models, results, shape):
    """MAC/s of each model and its share of the single-GEMM rate."""
    rate = gemm_rate()
    lines = [f'fp32 GEMM rate (2048^3): {rate / 1e9:.1f} GMAC/s',
             f'{"model":<26}{"GMAC":>8}{"GMAC/s":>9}{"GEMM share":>12}']
    for name, m in results.items():
        macs = count_backbone_macs(models[name], shape) * m.batch
        lines.append(f'{name:<26}{macs / 1e9:>8.1f}'
                     f'{macs / m.median / 1e9:>9.2f}'
                     f'{macs / m.median / rate:>12.0%}')
    return '\n'.join(lines)


def compile_and_warm(model, shapes, args):
    """Compile ``model`` and run it once at every size: returns the
    compiled module and what compiling cost (time, graphs, recompiles)."""
    device = torch.device(args.device)
    model.to(device).train(args.train)
    compiled = compile_backbone(model, args.compile_backend,
                                mode=args.compile_mode)
    with compile_stats() as stats:
        for shape in shapes:
            x = torch.randn(args.batch, 3, *shape, device=device)
            run_once(compiled, x, 'train' if args.train else 'forward',
                      args.amp)
    return compiled, stats


def compile_report(results):
    """Compiled vs eager latency of each model measured at one size."""
    lines = [f'{"compiled vs eager":<26}{"eager ms":>11}{"compiled ms":>13}'
             f'{"ratio":>8}']
    for name, m in results.items():
        compiled = results.get(f'{name} (compiled)')
        if compiled is None:
            continue
        lines.append(f'{name:<26}{m.median * 1e3:>11.1f}'
                     f'{compiled.median * 1e3:>13.1f}'
                     f'{compiled.median / m.median:>8.2f}')
    return '\n'.join(lines)


def main():
    args = parse_args()
    if args.list:
        for name, cfg in PRESETS.items():
            print(f'{name:<22}{cfg}')
        print('and every registered attention in Swin-T: '
              + ', '.join(n for n in preset_names() if n not in PRESETS))
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    mode = 'train' if args.train else 'forward'
    shapes = args.shape or [[800, 1280]]
    print(f'device: {machine()}; mode: {mode}; batch {args.batch}; '
          f'amp: {args.amp}; {args.warmup} warm-up + {args.repeats} timed '
          'runs, interleaved')

    if args.suite:
        groups = [(list(pair), pair[1]) for pair in SUITE]
    else:
        if not args.models:
            sys.exit('benchmark.py: name models, or use --suite')
        names = args.models + ([args.baseline] if args.baseline
                               and args.baseline not in args.models else [])
        groups = [(names, args.baseline)]

    if args.sweep:
        lo, hi = args.sweep
        sizes = sorted({int(round(lo * (hi / lo)**(i / max(args.steps - 1, 1))
                                  / 32) * 32) for i in range(args.steps)})
        shapes = [[s, s] for s in sizes]

    rows = []
    progress = tqdm(total=len(groups) * len(shapes), unit='size',
                    file=sys.stderr, disable=len(groups) * len(shapes) < 2)
    compile_rows = []
    for names, baseline in groups:
        models = dict(build_backbone(name) for name in names)
        if args.compile:
            for name in names:
                compiled, stats = compile_and_warm(models[name], shapes, args)
                models[f'{name} (compiled)'] = compiled
                compile_rows.append((name, stats))
                tqdm.write(f'{name}: compiled for {len(shapes)} size(s): '
                           f'{stats}')
        for shape in shapes:
            progress.set_description(f'{names[0]} {shape[0]}x{shape[1]}')
            results = measure(models, shape, args.batch, mode, args.warmup,
                              args.repeats, args.amp, args.device)
            rows.extend(results.values())
            tqdm.write(f'\n{shape[0]}x{shape[1]}:\n'
                       + report(results, baseline))
            if args.gemm_share:
                tqdm.write(gemm_share_report(models, results, shape))
            if args.compile:
                tqdm.write(compile_report(results))
            progress.update()
        del models
    progress.close()

    if compile_rows:
        print(f'\ntorch.compile (backend {args.compile_backend}, dynamic '
              f'shapes) over {len(shapes)} size(s):')
        print(f'{"model":<26}{"compile s":>10}{"graphs":>8}{"recompiles":>12}'
              f'{"graph breaks":>14}')
        for name, st in compile_rows:
            print(f'{name:<26}{st.seconds:>10.1f}{st.graphs:>8}'
                  f'{st.recompiles:>12}{st.num_graph_breaks:>14}')

    os.makedirs(args.out_dir, exist_ok=True)
    tag = 'sweep' if args.sweep else 'suite' if args.suite else 'run'
    csv = osp.join(args.out_dir, f'benchmark_{tag}_{mode}.csv')
    write_csv(csv, rows)
    print(f'\nwrote {csv}')
    if args.sweep:
        exponents = {}
        print('\nfitted exponents in pixels (1 = linear, 2 = quadratic):')
        print(f'{"model":<26}{"latency":>9}{"memory":>9}')
        for name in dict.fromkeys(m.name for m in rows):
            series = [m for m in rows if m.name == name]
            px = [m.pixels for m in series]
            t_exp = fit_exponent(px, [m.median for m in series])
            peaks = [m.peak_bytes for m in series]
            m_exp = fit_exponent(px, peaks) if all(peaks) else None
            exponents[name] = (t_exp, m_exp)
            print(f'{name:<26}{t_exp:>9.2f}'
                  f'{m_exp if m_exp is not None else float("nan"):>9.2f}')
        png = osp.join(args.out_dir, f'benchmark_sweep_{mode}.png')
        plot_sweep(png, rows, exponents,
                   f'{mode}, batch {args.batch}, {machine()}')
        print(f'wrote {png}')


if __name__ == '__main__':
    main()
