"""Fit the cost model to a GPU suite run, after the fact, on the CPU.

Reads a run's ``train.csv`` (``benchmarks/gpu_suite.py``), records each
measured model's training step on the meta device as the suite projects it
(bf16 autocast, batch and size of the row, the fused ops where the row ran
them), fits MFU, bandwidth efficiency and dispatch cost
(:func:`cost_model.calibrate`) to the bf16 rows' step times, and prints,
per row, the measured and projected step and speed ratio with both the
default and the fitted parameters. fp16 rows are left out of the fit: their
GradScaler's unscale and inf checks are not in the projection. Example::

    python benchmarks/calibrate.py /work/.device/3/train.csv
"""
import argparse
import csv
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
    """The run's measured (status ok) rows of ``precision``."""
    with open(path) as f:
        return [r for r in csv.DictReader(f)
                if r['status'] == 'ok' and r['precision'] == precision]


def record(rows: List[dict]) -> Dict[Tuple, List[cost_model.OpRecord]]:
    """Each row's step as the cost model records it."""
    specs = {s.label: s for s in MODEL_SPECS}
    steps = {}
    for r in rows:
        key = _key(r)
        if key in steps:
            continue
        backend = key[3]
        with torch.device('meta'):
            model = build_model(specs[r['model']], False, **(
                dict(attn_backend=backend) if backend else {}))
        steps[key] = cost_model.record_step(model, key[1:3], int(r['batch']),
                                            torch.bfloat16)
        print(f'recorded {key}', file=sys.stderr, flush=True)
    return steps


def _key(r: dict) -> Tuple:
    """A row's step: model, size and the backend its attentions ran."""
    return (r['model'], int(r['height']), int(r['width']),
            'triton' if r.get('attn_backend') == 'triton' else None)


def table(rows: List[dict], steps: Dict, default: cost_model.Hardware,
          fitted: cost_model.Hardware) -> str:
    """Measured vs projected step and ratio, each model against its
    baseline at the same size, with both parameter sets."""
    ms = {(r['model'], r['height'], r['width']): float(r['step_ms'])
          for r in rows}
    lines = ['| model | input | measured ms | projected ms (default / fitted)'
             ' | measured ratio | projected ratio (default / fitted) | '
             'error (default / fitted) |', '|' + ' --- |' * 6]
    for r in rows:
        size = (r['height'], r['width'])
        base = next((b for b in rows if b['model'] == r['baseline']
                     and (b['height'], b['width']) == size), None)
        proj = [cost_model.project(steps[_key(r)], hw).ms
                for hw in (default, fitted)]
        cells = [r['model'], 'x'.join(size), f"{float(r['step_ms']):.1f}",
                 f'{proj[0]:.1f} / {proj[1]:.1f}']
        if base is None:
            cells += ['', '', '']
        else:
            measured = ms[(base['model'], *size)] / float(r['step_ms'])
            ratios = [cost_model.project(steps[_key(base)], hw).ms / p
                      for hw, p in zip((default, fitted), proj)]
            cells += [f'{measured:.2f}',
                      f'{ratios[0]:.2f} / {ratios[1]:.2f}',
                      ' / '.join(f'{(measured / x - 1) * 100:+.0f}%'
                                 for x in ratios)]
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('train_csv')
    args = parser.parse_args(argv)
    rows = load_rows(args.train_csv)
    if len(rows) < 2:
        print(f'{args.train_csv}: fewer than two measured bf16 rows',
              file=sys.stderr)
        return 1
    steps = record(rows)
    samples = [(steps[_key(r)], float(r['step_ms'])) for r in rows]
    default = cost_model.Hardware()
    fitted, error = cost_model.calibrate(samples, default)
    base_error = math.sqrt(sum(
        math.log(cost_model.project(ops, default).ms / ms)**2
        for ops, ms in samples) / len(samples))
    print(f'{len(samples)} bf16 steps. Default {default}: RMS log error '
          f'{base_error:.2f}. Fitted: mfu={fitted.mfu}, '
          f'bandwidth_efficiency={fitted.bandwidth_efficiency}, '
          f'dispatch_us={fitted.dispatch_us}: RMS log error {error:.2f}.')
    print(table(rows, steps, default, fitted))
    return 0


if __name__ == '__main__':
    sys.exit(main())
