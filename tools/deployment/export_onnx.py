"""Export a backbone or a whole model to ONNX and check it in ONNX Runtime.

What is exported, by the config's task: a detector's backbone + neck (the
feature pyramid; box post-processing is mmdeploy's per-head business), a
segmentor whole (per-pixel logits at the input size), a classifier whole
(class scores), or with ``--backbone`` the backbone alone. The graph takes
normalised ``(B, C, H, W)`` images: the data preprocessor's mean / std and
size-divisor padding stay outside, as in mmdeploy.

Examples::

    # detector features, any input size, checked at three sizes
    python tools/deployment/export_onnx.py \\
        configs/flatten/mask-rcnn_flatten-swin-t_fpn_1x_coco.py CKPT \\
        --shape 800 1280 --dynamic
    # backbone only, random weights, fixed size
    python tools/deployment/export_onnx.py CONFIG --backbone --shape 224 224

After writing the file it runs in ONNX Runtime on random inputs and prints
the largest absolute difference to PyTorch: at the export size and, with
``--dynamic``, also at a larger and at an odd size (or at ``--check-shape``
sizes).
"""
import argparse
import os
import os.path as osp
import sys

import torch
from mmengine.config import Config, DictAction
from mmengine.runner import load_checkpoint

import vitattn_mm  # noqa: F401  (registers backbones)
from vitattn_mm.deployment import (EXPORTERS, check_onnx, export_onnx,
                                   wrap_for_export)
from vitattn_tools.flops import build_model


def parse_args():
    parser = argparse.ArgumentParser(
        description='Export a model (or its backbone) to ONNX and compare '
        'ONNX Runtime with PyTorch')
    parser.add_argument('config', help='config file')
    parser.add_argument('checkpoint', nargs='?',
                        help='weights to load (default: random init)')
    parser.add_argument('--shape', type=int, nargs=2, required=True,
                        metavar=('H', 'W'), help='input size traced')
    parser.add_argument('--dynamic', action='store_true',
                        help='symbolic batch, height and width')
    parser.add_argument('--backbone', action='store_true',
                        help='export the backbone alone')
    parser.add_argument('--exporter', choices=EXPORTERS,
                        default='torchscript',
                        help='torch.onnx exporter (dynamo=False or True); '
                        'see docs/deployment.md. Default: torchscript')
    parser.add_argument('--opset', type=int, default=17)
    parser.add_argument('--out', help='ONNX file (default: work_dirs/'
                        'onnx/<config name>[_backbone].onnx)')
    parser.add_argument('--check-shape', type=int, nargs=2,
                        action='append', metavar=('H', 'W'),
                        help='sizes to check in ONNX Runtime (repeatable); '
                        'default: the export size, plus with --dynamic a '
                        'larger and an odd one')
    parser.add_argument('--no-check', action='store_true',
                        help='write the file without running it')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings')
    return parser.parse_args()


def default_check_shapes(shape, dynamic):
    h, w = shape
    if not dynamic:
        return [(h, w)]
    return [(h, w), (h + 32, w + 64), (h + 1, w + 33)]


def main():
    args = parse_args()
    cfg = Config.fromfile(args.config)
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    if args.backbone:
        cfg.model = cfg.model.backbone
    # Weights come from CHECKPOINT (or stay random), never from init_cfg.
    cfg.model.pop('init_cfg', None)
    if cfg.model.get('backbone') is not None:
        cfg.model.backbone.pop('init_cfg', None)
    model = build_model(cfg)
    if args.checkpoint:
        load_checkpoint(model, args.checkpoint, map_location='cpu',
                        revise_keys=[(r'^module\.', ''),
                                     (r'^backbone\.', '')]
                        if args.backbone else [(r'^module\.', '')])
    model = model.cpu().eval()
    try:
        module, what = wrap_for_export(model)
    except TypeError as e:
        sys.exit(f'export_onnx.py: {e} (--backbone)')

    name = osp.splitext(osp.basename(args.config))[0]
    out = args.out or osp.join('work_dirs', 'onnx', name +
                               ('_backbone' if args.backbone else '') +
                               '.onnx')
    os.makedirs(osp.dirname(osp.abspath(out)), exist_ok=True)
    export_onnx(module, out, args.shape, dynamic=args.dynamic,
                exporter=args.exporter, opset=args.opset)
    print(f'wrote {out}: {what}, {args.exporter} exporter, opset '
          f'{args.opset}, {"dynamic" if args.dynamic else "static"} input '
          f'size (traced at {args.shape[0]}x{args.shape[1]})')
    if args.no_check:
        return
    shapes = args.check_shape or default_check_shapes(args.shape,
                                                      args.dynamic)
    results = check_onnx(out, module, shapes)
    print('ONNX Runtime vs PyTorch:')
    for result in results:
        print(f'  {result}')
    print(f'max abs diff: {max(r.max_abs_diff for r in results):.2e}')


if __name__ == '__main__':
    with torch.no_grad():
        main()
