"""Draw where a query looks, for every family and its softmax counterpart.

One row per family: the input with the query marked, then the chosen
layer's attention distribution over its keys (overlaid on the image) beside
softmax attention computed from the same queries and keys. Map definitions:
docs/attention_maps.md.

Examples::

    python tools/visualize_attention.py --out attention.png
    python tools/visualize_attention.py --image demo.jpg --point 120 80 \
        --families flatten msf --head 0
    python tools/visualize_attention.py \
        --checkpoint flatten=pretrain/flatten_swin_t.pth --out trained.png
    # every registered attention, one row each, in a plain ViT
    python tools/visualize_attention.py --families --attentions
    # any registered attention, in any skeleton: one more row
    python tools/visualize_attention.py --families \
        --backbone '{"type": "AttnViT", "arch": "tiny", "attn_cfgs":
                     {"type": "FocusedLinearAttention"},
                     "with_cls_token": false, "out_type": "featmap"}' \
        --layer stages.0.blocks.0.attn
"""
import argparse
import json
import os.path as osp
import sys

import cv2
import matplotlib
import numpy as np
import torch
import torch.nn.functional as F
from mmengine.registry import MODELS, init_default_scope

import vitattn_mm  # noqa: F401
from vitattn_mm.datasets import render_demo_image
from vitattn_mm.registry import ATTENTIONS
from vitattn_tools import attention_maps

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402

#: family -> (backbone config, map function); small variants: the maps are
#: per layer, and the tool should run in seconds on a CPU.
FAMILIES = {
    'flatten': (dict(type='FLattenSwinTransformer', arch='tiny'),
                attention_maps.flatten_maps),
    'l2vit': (dict(type='L2ViT', arch='tiny'), attention_maps.l2vit_maps),
    'msf': (dict(type='MSFViT', arch='tiny'), attention_maps.msf_maps),
    'lavit': (dict(type='LaViT', arch='small'), attention_maps.lavit_maps),
}
MEAN = np.array([123.675, 116.28, 103.53])
STD = np.array([58.395, 57.12, 57.375])


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--image', help='image file; default: a demo scene')
    parser.add_argument('--size', type=int, nargs=2, default=[224, 224],
                        metavar=('H', 'W'), help='network input size')
    parser.add_argument('--point', type=float, nargs=2, metavar=('X', 'Y'),
                        help='query pixel in the resized image; default: '
                        'the centre')
    parser.add_argument('--families', nargs='*', default=list(FAMILIES),
                        choices=list(FAMILIES))
    parser.add_argument('--attentions', nargs='*',
                        choices=sorted(ATTENTIONS.module_dict),
                        help='one row per registered attention (all of them '
                        'when given without names), each in a plain ViT')
    parser.add_argument('--backbone', help='one more row: a backbone config '
                        '(JSON) with any registered attention')
    parser.add_argument('--layer', default='stages.0.blocks.0.attn',
                        help="the --backbone's attention module to draw")
    parser.add_argument('--head', type=int,
                        help='one attention head; default: mean over heads')
    parser.add_argument('--checkpoint', action='append', default=[],
                        metavar='FAMILY=PATH',
                        help='load weights (official or ours) into a '
                        "family's backbone; repeatable")
    parser.add_argument('--seed', type=int, default=0,
                        help='seed of the random initialisation')
    parser.add_argument('--out', default='attention_maps.png')
    parser.add_argument('--dpi', type=int, default=110)
    return parser.parse_args(argv)


def load_image(path, size):
    if path is None:
        return render_demo_image(seed=3, size=tuple(size))
    img = cv2.imread(path)
    if img is None:
        sys.exit(f'visualize_attention.py: cannot read image {path!r}')
    return cv2.resize(img[..., ::-1], tuple(size[::-1]),
                      interpolation=cv2.INTER_AREA)


def build(family, checkpoint, seed):
    cfg = dict(FAMILIES[family][0])
    if checkpoint:
        cfg['init_cfg'] = dict(type='Pretrained', checkpoint=checkpoint)
    torch.manual_seed(seed)
    model = MODELS.build(cfg)
    if checkpoint:
        model.init_weights()
    return model.eval()


def overlay(ax, rgb, amap, point):
    """The map upsampled to the image (nearest: token cells stay visible)
    over a dimmed copy of it; the query token's cell outlined."""
    h, w = rgb.shape[:2]
    heat = F.interpolate(amap.weights[None, None], size=(h, w),
                         mode='nearest')[0, 0].numpy()
    ax.imshow(rgb, alpha=0.45)
    ax.imshow(heat / heat.max(), cmap='inferno', alpha=0.6, vmin=0, vmax=1)
    (r, c), (gh, gw) = amap.query, amap.query_grid
    ax.add_patch(
        plt.Rectangle((c * w / gw, r * h / gh), w / gw, h / gh, fill=False,
                      edgecolor='cyan', linewidth=1.5))
    ax.plot(*point, marker='+', color='cyan', markersize=10)
    ax.set_title(amap.title, fontsize=8)
    kh, kw = amap.weights.shape
    ax.set_xlabel(f'{kh}x{kw} keys' + (f'\n{amap.note}' if amap.note else ''),
                  fontsize=6)
    ax.set_xticks([])
    ax.set_yticks([])


def main(argv=None):
    args = parse_args(argv)
    init_default_scope('mmdet')
    rgb = load_image(args.image, args.size)
    h, w = rgb.shape[:2]
    point = args.point or (w / 2, h / 2)
    image = torch.from_numpy(
        ((rgb - MEAN) / STD).transpose(2, 0, 1).astype(np.float32))[None]
    checkpoints = dict(c.split('=', 1) for c in args.checkpoint)
    unknown = set(checkpoints) - set(FAMILIES)
    if unknown:
        sys.exit(f'visualize_attention.py: unknown families {sorted(unknown)}'
                 f'; valid: {sorted(FAMILIES)}')

    rows, names = [], list(args.families)
    for family in args.families:
        model = build(family, checkpoints.get(family), args.seed)
        rows.append(FAMILIES[family][1](model, image, point, head=args.head))
    attentions = args.attentions
    if attentions is not None and not attentions:
        attentions = sorted({cls.__name__ for cls in
                             ATTENTIONS.module_dict.values()})
    for name in attentions or []:
        rows.append(attention_maps.attention_row(name, image, point,
                                                 args.head, args.seed))
        names.append(name)
    if args.backbone:
        cfg = json.loads(args.backbone)
        torch.manual_seed(args.seed)
        model = MODELS.build(cfg).eval()
        rows.append(attention_maps.layer_maps(model, image, point, args.layer,
                                              head=args.head))
        names.append(cfg['type'])
    if not rows:
        sys.exit('visualize_attention.py: nothing to draw (give --families '
                 'or --backbone)')
    cols = 1 + max(len(r) for r in rows)
    fig, axes = plt.subplots(len(rows), cols, figsize=(2.8 * cols,
                                                       3.4 * len(rows)),
                             squeeze=False)
    for axrow, family, maps in zip(axes, names, rows):
        axrow[0].imshow(rgb)
        axrow[0].plot(*point, marker='+', color='cyan', markersize=12)
        axrow[0].set_title(f'{family}: input, query', fontsize=8)
        axrow[0].set_xticks([])
        axrow[0].set_yticks([])
        for ax, amap in zip(axrow[1:], maps):
            overlay(ax, rgb, amap, point)
        for ax in axrow[1 + len(maps):]:
            ax.axis('off')
    weights = ('weights: ' + ', '.join(f'{k}={osp.basename(v)}'
                                       for k, v in checkpoints.items())
               if checkpoints else '')
    fig.suptitle(
        f'query at ({point[0]:.0f}, {point[1]:.0f}); '
        f'{"mean over heads" if args.head is None else f"head {args.head}"}'
        f'; random init (seed {args.seed}) unless loaded. {weights}',
        fontsize=9)
    fig.tight_layout(h_pad=1.5)
    fig.savefig(args.out, dpi=args.dpi)
    print(f'wrote {args.out}')


if __name__ == '__main__':
    main()
