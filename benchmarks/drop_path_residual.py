"""A block's residual with stochastic depth, forward and backward: mmcv's
``DropPath`` and the sum (what the blocks ran before 0.5.9) against
:func:`~vitattn_mm.models.layers.drop_path.add_residual` (one pass each
way).

Per case, the projected GPU cost of each route from the cost model (the
case's dtypes, on the meta device: ms, GB moved, ops) and the CPU time of
each in fp32, in interleaved repeats (mmcv, ours, mmcv, ...) so that drift
of a shared machine hits both alike; medians and the ratio mmcv / ours
(> 1: ``add_residual`` is faster). Not a test: the CPU numbers depend on
the machine, which is printed first.

Examples::

    python benchmarks/drop_path_residual.py
    python benchmarks/drop_path_residual.py --repeats 12 --threads 2
"""
import torch
from mmcv.cnn.bricks import DropPath

import cost_model
from route_table import interleaved_medians, parse_cpu_args
from vitattn_mm.models.layers.drop_path import add_residual

#: name -> (tokens' shape, the stream's dtype, the branch's dtype): the
#: residuals of FLatten-Swin-T's stages 1 and 2 at 800x1280, batch 2,
#: under bf16 autocast (stage 1's stream is fp32, the LayerNorm's output;
#: after the patch merging it is bf16).
CASES = {
    'stage 1 (fp32 stream)': ((2, 64000, 96), torch.float32,
                              torch.bfloat16),
    'stage 2 (bf16 stream)': ((2, 16000, 192), torch.bfloat16,
                              torch.bfloat16),
}

ROUTES = {
    "mmcv's DropPath + sum": lambda x, y, dp: x + dp(y),
    'add_residual': add_residual,
}


def step(route, identity, branch, drop_path):
    out = ROUTES[route](identity, branch, drop_path)
    torch.autograd.grad(out, (identity, branch), torch.ones_like(out))


def projected(case, route):
    """The cost model's projection of one route."""
    shape, stream, branch = case
    x = torch.empty(shape, device='meta', dtype=stream, requires_grad=True)
    y = torch.empty(shape, device='meta', dtype=branch, requires_grad=True)
    recorder = cost_model.StepRecorder()
    with recorder:
        step(route, x, y, DropPath(0.1).train())
    return cost_model.project(recorder.ops)


def main():
    args = parse_cpu_args(__doc__.split('\n')[0])
    drop_path = DropPath(0.1).train()
    for name, case in CASES.items():
        g = torch.Generator().manual_seed(0)
        x, y = (torch.randn(case[0], generator=g) for _ in range(2))

        def prepare(route):
            a, b = (t.detach().requires_grad_() for t in (x, y))
            return lambda: step(route, a, b, drop_path)

        median = interleaved_medians(list(ROUTES), prepare, args.repeats)
        for route in ROUTES:
            p = projected(case, route)
            print(f'| {name} | {route} | {p.ms:.3f} | {p.gbytes:.3f} | '
                  f'{p.ops} | {median[route]:.1f} |')
        mmcv, ours = median.values()
        print(f'| {name} | ratio mmcv / add_residual | | | | '
              f'{mmcv / ours:.2f} |')


if __name__ == '__main__':
    main()
