"""One LA layer's softmax, product with the values and Diagonality-Preserving
loss, forward and backward: the loss reading the probability map the
layer's softmax wrote (what LA layers do since 0.5.5) against the loss
computing its own fp32 softmax of the same logits (before).

Per case, the projected GPU step of each route from the cost model (bf16,
on the meta device: ms, GB moved, ops) and the CPU time of each, in
interleaved repeats (own softmax, layer's map, own softmax, ...) so that
drift of a shared machine hits both alike; medians and the ratio own /
layer's (> 1: reading the layer's map is faster). Not a test: the CPU
numbers depend on the machine, which is printed first.

Examples::

    python benchmarks/lavit_dp_loss.py
    python benchmarks/lavit_dp_loss.py --repeats 12 --threads 1
"""
import torch

import cost_model
from route_table import interleaved_medians, parse_cpu_args
from vitattn_mm.models.attentions.functional import masked_softmax
from vitattn_mm.models.attentions.less_attention.loss import \
    diagonality_preserving_loss
from vitattn_mm.ops import apply_probabilities

#: name -> (batch, heads, query grid, key grid, head width): LaViT-S's LA
#: layers at 800x1280, batch 2.
CASES = {
    'LaViT-S stage 3 (pooled 50x80 -> 25x40)': (2, 5, (50, 80), (25, 40),
                                                64),
    'LaViT-S stage 4 (square 25x40)': (2, 8, (25, 40), (25, 40), 64),
}


def step(logits, v, query_hw, key_hw, reads_layers_map: bool):
    """The layer's attention output and its DP loss, backward included."""
    probs = masked_softmax(logits)
    out = apply_probabilities(probs, v)
    loss = out.float().mean() + diagonality_preserving_loss(
        logits, query_hw, key_hw, probs=probs if reads_layers_map else None)
    loss.backward()


def inputs(case, device, dtype, generator=None):
    B, h, query_hw, key_hw, d = case
    Nq, Nk = query_hw[0] * query_hw[1], key_hw[0] * key_hw[1]
    make = (lambda *s: torch.empty(*s, device=device, dtype=dtype)) \
        if device == 'meta' else \
        (lambda *s: torch.randn(*s, generator=generator).to(dtype))
    return (make(B, h, Nq, Nk).requires_grad_(),
            make(B, h, Nk, d).requires_grad_())


def projected(case, reads_layers_map: bool):
    """The cost model's projection of one route (bf16 autocast)."""
    logits, v = inputs(case, 'meta', torch.bfloat16)
    recorder = cost_model.StepRecorder()
    with recorder, cost_model.MetaAutocast():
        with torch.autocast('cpu', dtype=torch.bfloat16):
            step(logits, v, case[2], case[3], reads_layers_map)
    return cost_model.project(recorder.ops)


def main():
    args = parse_cpu_args(__doc__.split('\n')[0])
    for name, case in CASES.items():
        g = torch.Generator().manual_seed(0)
        logits, v = inputs(case, 'cpu', torch.float32, g)

        def prepare(route):
            x, w = (t.detach().requires_grad_() for t in (logits, v))
            return lambda: step(x, w, case[2], case[3], route)

        median = interleaved_medians((False, True), prepare, args.repeats)
        for route, label in ((False, 'own fp32 softmax'),
                             (True, "layer's map")):
            p = projected(case, route)
            print(f'| {name} | {label} | {p.ms:.2f} | {p.gbytes:.2f} | '
                  f'{p.ops} | {median[route]:.0f} |')
        print(f'| {name} | ratio own / layer\'s | | | | '
              f'{median[False] / median[True]:.2f} |')


if __name__ == '__main__':
    main()
