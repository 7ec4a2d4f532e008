"""What Less-Attention saves: LaViT vs the same network with vanilla
attention in its LA layers, FLOPs and CPU latency side by side.

The networks are the RetinaNet LaViT config's backbone and two twins built
with ``less_attention=False`` (every LA layer computes its own ``Q K^T``
again; patch embeddings, attention residual and FFNs identical):

* "vanilla, fused": VA layers whose scores nobody reads run PyTorch's fused
  ``scaled_dot_product_attention``, as our backbone does;
* "vanilla, explicit": every layer materialises its ``N_q x N_k`` scores
  (``softmax(Q K^T) V`` written out, as PVT's and the paper's code do), the
  implementation whose cost Less-Attention cuts.

FLOPs come from :func:`vitattn_tools.flops.count_complexity` on the
whole detector (only the backbone rows differ), in both counting
conventions; latency is the backbone's forward pass, timed in interleaved
repeats (median) by :func:`vitattn_tools.benchmark.measure`.

Example::

    python benchmarks/lavit_less_attention.py   # LaViT-S, 800x1280
    python benchmarks/lavit_less_attention.py --arch tiny --repeats 10
"""
import argparse
import copy
import platform

import torch
from mmengine.config import Config
from mmengine.registry import MODELS, init_default_scope

from vitattn_mm.models.attentions import VanillaAttention
from vitattn_tools.benchmark import measure
from vitattn_tools.flops import CONVENTIONS, count_complexity

CONFIG = 'configs/lavit/retinanet_lavit-{}_fpn_1x_coco.py'


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--arch', default='small', choices=['tiny', 'small'],
                        help='the RetinaNet config whose backbone to use')
    parser.add_argument('--shape', type=int, nargs=2, default=[800, 1280],
                        metavar=('H', 'W'))
    parser.add_argument('--warmup', type=int, default=2)
    parser.add_argument('--repeats', type=int, default=7)
    parser.add_argument('--threads', type=int,
                        help='torch intra-op threads (default: torch\'s)')
    return parser.parse_args()


def variants(arch: str):
    """(label, detector config, explicit attention) for LaViT and its
    vanilla twins."""
    cfg = Config.fromfile(CONFIG.format(arch[0]))
    cfg.model.backbone.init_cfg = None
    vanilla = copy.deepcopy(cfg)
    vanilla.model.backbone.less_attention = False
    name = f'LaViT-{arch[0].upper()}'
    return [(f'{name} (Less-Attention)', cfg, False),
            (f'{name}, vanilla, fused', vanilla, False),
            (f'{name}, vanilla, explicit', vanilla, True)]


def main():
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    shape = tuple(args.shape)
    print(f'Machine: {platform.processor() or platform.machine()}, '
          f'{torch.get_num_threads()} threads, torch {torch.__version__}; '
          f'input 1x3x{shape[0]}x{shape[1]}, batch 1, fp32, no grad\n')

    backbones, flops = {}, {}
    for label, cfg, explicit in variants(args.arch):
        init_default_scope('mmdet')
        model = MODELS.build(cfg.model)
        if explicit:
            for module in model.modules():
                if isinstance(module, VanillaAttention):
                    module.keep_logits = True
        result = count_complexity(cfg, shape, model=model)
        flops[label] = {c: result.grouped(c) for c in CONVENTIONS}
        backbones[label] = model.backbone
    times = measure(backbones, shape, warmup=args.warmup,
                    repeats=args.repeats)

    def gflops(label, convention, parts=('backbone', )):
        return sum(flops[label][convention][p][1] for p in parts) / 1e9

    print(f'{"":<42}{"GFLOPs":>8}{"w/o attn matmul":>17}{"params (M)":>12}'
          f'{"median ms":>11}{"IQR ms":>8}')
    for label in backbones:
        print(f'{label + ", backbone":<42}{gflops(label, "full"):>8.1f}'
              f'{gflops(label, "no_attn_matmul"):>17.1f}'
              f'{flops[label]["full"]["backbone"][0] / 1e6:>12.2f}'
              f'{times[label].median * 1e3:>11.0f}'
              f'{times[label].spread * 1e3:>8.0f}')
    for label in backbones:
        parts = tuple(flops[label]['full'])
        print(f'{label + ", RetinaNet":<42}'
              f'{gflops(label, "full", parts):>8.1f}'
              f'{gflops(label, "no_attn_matmul", parts):>17.1f}')

    la, *vanillas = backbones
    print()
    for vanilla in vanillas:
        full, legacy = (gflops(la, c) / gflops(vanilla, c)
                        for c in CONVENTIONS)
        print(f'Less-Attention / {vanilla.split(", ", 1)[1]} (backbone): '
              f'FLOPs {full:.3f} (w/o attn matmul {legacy:.3f}), latency '
              f'{times[la].median / times[vanilla].median:.3f}')


if __name__ == '__main__':
    main()
