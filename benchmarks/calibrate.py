"""Fit the cost model to GPU suite runs, after the fact, on the CPU.

Reads runs' ``train.csv`` and ``backends.csv`` (``benchmarks/gpu_suite.py``),
takes each measured model's training step as the suite recorded it on the
meta device when it ran (``steps.json`` beside the CSVs: bf16 autocast,
batch and size of the row, the fused ops where the row ran them; a run
without one is recorded from today's code, which may differ), fits MFU,
bandwidth efficiency, dispatch cost and the fused ops' efficiency
(:func:`cost_model.calibrate`) to the bf16 rows' step times, and prints,
per row, the measured and projected step and speed ratio (a family against
its baseline; a fused row against its eager row) with both the default and
the fitted parameters. fp16 rows are left out of the fit: their
GradScaler's unscale and inf checks are not in the projection. Then the
peaks: the factor on the saved activations that projects the measured
peaks (:func:`cost_model.fit_peak`, :func:`peak_samples`), each row's
error with it and with ``cost_model.PEAK_PER_SAVED_BYTE``. With
``--launches`` the fused steps are taken as launched (each Triton launch a
kernel, ``cost_model.py --launches``): the suite keeps that record of a
fused step beside its default one since 0.5.11.
Example (the runs kept in the repository)::

    python benchmarks/calibrate.py benchmarks/gpu_runs/*/train.csv \
        benchmarks/gpu_runs/*/backends.csv
"""
import argparse
import csv
import json
import math
import os
import sys
from typing import Dict, List, Optional, Tuple

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vitattn_mm  # noqa: E402,F401  (registers the backbones)
import cost_model  # noqa: E402
from gpu_suite import MODEL_SPECS, build_model  # noqa: E402


def load_rows(path: str, precision: str = 'bf16') -> List[dict]:
    """The run's measured (status ok) rows of ``precision``, each with the
    file it came from (``source``): rows are compared within a file."""
    with open(path) as f:
        return [dict(r, source=path) for r in csv.DictReader(f)
                if r['status'] == 'ok' and r['precision'] == precision]


STEPS_FILE = cost_model.STEPS_FILE


def step_name(key: Tuple, launched: bool = False) -> str:
    """The name of a :func:`step_key` in :data:`STEPS_FILE`."""
    return cost_model.step_name(*key, launched=launched)


def record(rows: List[dict], launched: bool = False
           ) -> Dict[Tuple, List[cost_model.OpRecord]]:
    """Each row's step as the cost model records it: from the run's
    :data:`STEPS_FILE` (the step that ran) where it has one, else recorded
    now, from the code as it is (which may have changed since the run).
    ``launched``: the fused steps as launched (``--launches``), the run's
    kept record of them where it has one."""
    specs = {s.label: s for s in MODEL_SPECS}
    kept: Dict[str, dict] = {}  # each run's file, read once
    steps = {}
    for r in rows:
        key = step_key(r)
        if key in steps:
            continue
        run_dir = os.path.dirname(r['source'])
        if run_dir not in kept:
            kept[run_dir] = _kept(run_dir, STEPS_FILE)
        name = step_name(key, launched)
        if name in kept[run_dir]:
            steps[key] = cost_model.untally(kept[run_dir][name])
            continue
        backend = key[3]
        with torch.device('meta'):
            model = build_model(specs[r['model']], False, **(
                dict(attn_backend=backend) if backend else {}))
        steps[key] = cost_model.record_step(model, key[1:3], int(r['batch']),
                                            torch.bfloat16,
                                            launches=launched)
        print(f'recorded {key} from the code as it is now: the run keeps '
              f'no {STEPS_FILE} entry {name!r}', file=sys.stderr, flush=True)
    return steps


def _kept(run_dir: str, name: str) -> dict:
    """A run's kept JSON file ``name`` (empty where it has none)."""
    path = os.path.join(run_dir, name)
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def peak_samples(rows: List[dict]) -> List[Tuple[dict, int, int]]:
    """``(row, parameters, saved bytes)`` of each row with a measured peak
    and a record of what its step kept: the row's own ``parameters`` and
    ``saved_mib`` columns, or for a run that predates them its
    :data:`cost_model.MEMORY_FILE` (recorded from the commit it measured;
    never from today's code, whose steps keep less)."""
    kept: Dict[str, dict] = {}
    samples = []
    for r in rows:
        if not r.get('peak_mib'):
            continue
        if r.get('saved_mib'):
            samples.append((r, int(r['parameters']),
                            round(float(r['saved_mib']) * 2**20)))
            continue
        run_dir = os.path.dirname(r['source'])
        if run_dir not in kept:
            kept[run_dir] = _kept(run_dir, cost_model.MEMORY_FILE)
        entry = kept[run_dir].get(step_name(step_key(r)))
        if entry:
            samples.append((r, *entry))
    return samples


def peak_table(samples: List[Tuple[dict, int, int]],
               factor: float) -> str:
    """Measured vs projected peaks, with the constant and the fitted
    factor on the saved bytes."""
    lines = ['| run | model | input | backend | measured MiB | projected MiB '
             '(constant / fitted) | error (constant / fitted) |',
             '|' + ' --- |' * 7]
    for r, parameters, saved in samples:
        measured = float(r['peak_mib'])
        projected = [cost_model.projected_peak_mib(parameters, saved, k)
                     for k in (cost_model.PEAK_PER_SAVED_BYTE, factor)]
        lines.append('| ' + ' | '.join([
            os.path.basename(os.path.dirname(r['source'])) or '.',
            r['model'], f"{r['height']}x{r['width']}",
            r.get('attn_backend') or '', f'{measured:.0f}',
            ' / '.join(f'{p:.0f}' for p in projected),
            ' / '.join(f'{(p / measured - 1) * 100:+.1f}%'
                       for p in projected)]) + ' |')
    return '\n'.join(lines)


def step_key(r: dict) -> Tuple:
    """A row's step: model, size and the backend its attentions ran."""
    return (r['model'], int(r['height']), int(r['width']),
            r.get('attn_backend') or None)


def reference(row: dict, rows: List[dict]) -> Optional[dict]:
    """What ``row``'s speed ratio is measured against, in the same file at
    the same size: a fused row's eager row, a family's baseline."""
    def same(other):
        return other['source'] == row['source'] and \
            (other['height'], other['width']) == (row['height'], row['width'])
    if row.get('attn_backend') == 'triton' and 'role' not in row:
        return next((r for r in rows if same(r) and r['model'] ==
                     row['model'] and r['attn_backend'] == 'eager'), None)
    return next((r for r in rows if same(r) and
                 r['model'] == row.get('baseline')), None)


def table(rows: List[dict], steps: Dict, default: cost_model.Hardware,
          fitted: cost_model.Hardware) -> str:
    """Measured vs projected step and speed ratio (see :func:`reference`)
    with both parameter sets."""
    lines = ['| run | model | input | backend | measured ms | projected ms '
             '(default / fitted) | against | measured ratio | projected '
             'ratio (default / fitted) | error (default / fitted) |',
             '|' + ' --- |' * 10]
    for r in rows:
        base = reference(r, rows)
        proj = [cost_model.project(steps[step_key(r)], hw).ms
                for hw in (default, fitted)]
        cells = [os.path.basename(os.path.dirname(r['source'])) or '.',
                 r['model'], f"{r['height']}x{r['width']}",
                 r.get('attn_backend') or '', f"{float(r['step_ms']):.1f}",
                 f'{proj[0]:.1f} / {proj[1]:.1f}']
        if base is None:
            cells += ['', '', '', '']
        else:
            measured = float(base['step_ms']) / float(r['step_ms'])
            ratios = [cost_model.project(steps[step_key(base)], hw).ms / p
                      for hw, p in zip((default, fitted), proj)]
            against = base['model'] if base['model'] != r['model'] else \
                base['attn_backend']
            cells += [against, f'{measured:.2f}',
                      f'{ratios[0]:.2f} / {ratios[1]:.2f}',
                      ' / '.join(f'{(measured / x - 1) * 100:+.0f}%'
                                 for x in ratios)]
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('csv', nargs='+',
                        help="a suite run's train.csv or backends.csv")
    parser.add_argument('--launches', action='store_true',
                        help='fit the fused steps as launched (each Triton '
                        'launch a kernel: cost_model.py --launches), from '
                        "the runs' kept records of them where they have "
                        'them')
    args = parser.parse_args(argv)
    rows = [r for path in args.csv for r in load_rows(path)]
    if len(rows) < 2:
        print(f"{', '.join(args.csv)}: fewer than two measured bf16 rows",
              file=sys.stderr)
        return 1
    steps = record(rows, args.launches)
    samples = [(steps[step_key(r)], float(r['step_ms'])) for r in rows]
    default = cost_model.Hardware()
    fitted, error = cost_model.calibrate(samples, default)
    base_error = math.sqrt(sum(
        math.log(cost_model.project(ops, default).ms / ms)**2
        for ops, ms in samples) / len(samples))
    print(f'{len(samples)} bf16 steps. Default {default}: RMS log error '
          f'{base_error:.2f}. Fitted: mfu={fitted.mfu}, '
          f'bandwidth_efficiency={fitted.bandwidth_efficiency}, '
          f'dispatch_us={fitted.dispatch_us}, '
          f'fused_efficiency={fitted.fused_efficiency}: RMS log error '
          f'{error:.2f}.')
    print(table(rows, steps, default, fitted))
    samples = peak_samples(rows)
    if samples:
        factor, worst = cost_model.fit_peak(
            [(p, b, float(r['peak_mib'])) for r, p, b in samples])
        print(f'\n{len(samples)} bf16 peaks: 16 B a parameter + {factor:.3f} '
              f'x the saved activations (PEAK_PER_SAVED_BYTE '
              f'{cost_model.PEAK_PER_SAVED_BYTE}); largest error '
              f'{worst * 100:.1f}%.')
        print(peak_table(samples, factor))
    return 0


if __name__ == '__main__':
    sys.exit(main())
