"""What a backbone builds, stage by stage, read off its stage specs.

Models are preset names, config files (their backbone), ``Type[:arch]`` or
JSON dicts, as ``tools/benchmark.py`` takes them; built on the meta device
(no memory, no weights). Examples::

    python tools/describe_backbone.py configs/flatten/mask-rcnn_flatten-swin-t_fpn_1x_coco.py
    python tools/describe_backbone.py LaViT:small
    python tools/describe_backbone.py '{"type": "AttnPVT", "arch": "tiny", "attn_cfgs": {"type": "FocusedLinearAttention"}}'
"""
import argparse
from itertools import groupby
from typing import List

import vitattn_mm  # noqa: F401  (registers backbones)
from vitattn_tools.benchmark import build_backbone
from vitattn_tools.meta import on_meta_device


def attention_runs(spec) -> str:
    """A stage's attentions in order, runs of the same one counted:
    ``2 x WindowMSA (windows)``."""
    names = [f'{name} (windows)' if windowed else name
             for name, windowed in (spec.block_attention(j)
                                    for j in range(spec.depth))]
    return ', '.join(f'{len(list(run))} x {name}'
                     for name, run in groupby(names))


def describe(model) -> List[str]:
    """Markdown lines: one row per stage of ``model``'s stage specs, then
    its parameters and least input size."""
    lines = ['| stage | width | heads | pretraining grid | blocks | '
             'attentions | drop path | least grid |', '|' + ' --- |' * 8]
    for i, spec in enumerate(model.stage_specs):
        rates = spec.drop_path_rates
        lines.append(
            f'| {i} | {spec.embed_dims} | {spec.num_heads} | '
            f'{spec.grid[0]}x{spec.grid[1]} | {spec.depth} | '
            f'{attention_runs(spec)} | {rates[0]:.3f}-{rates[-1]:.3f} | '
            f'{spec.min_grid()} |')
    params = sum(p.numel() for p in model.parameters())
    lines += ['', f'{type(model).__name__}: {params / 1e6:.2f} M parameters, '
              f'inputs of at least {model.min_input_size}x'
              f'{model.min_input_size} pixels']
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('model', help='preset, config file, Type[:arch] or '
                        'a JSON dict')
    args = parser.parse_args(argv)
    with on_meta_device():
        label, model = build_backbone(args.model)
    print(f'{label}\n')
    print('\n'.join(describe(model)))


if __name__ == '__main__':
    main()
