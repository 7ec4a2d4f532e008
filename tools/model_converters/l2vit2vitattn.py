"""Convert an official L2ViT checkpoint to vitattn_mm's key names.

The released L2ViT files (ChuanyangZheng/L2ViT, e.g.
``L2ViT-Tiny-checkpoint-best-ema.pth``) hold ``{'model': state_dict,
'model_ema': state_dict, 'args': argparse.Namespace, ...}`` with the
official names. This writes ``{'state_dict': ...}`` with the backbone under
``backbone.`` and the ImageNet head under ``head.fc.``, which

* the classification configs load with ``load_from`` (e.g. to evaluate the
  released weights with ``tools/test.py``), and
* the ``L2ViT`` backbone loads with
  ``init_cfg=dict(type='Pretrained', checkpoint=DST)``.

The official file itself loads through ``init_cfg`` too (the backbone
converts on the fly); converting once saves doing it at every start and
drops the optimizer state and the pickled training options.

Example::

    python tools/model_converters/l2vit2vitattn.py \
        L2ViT-Tiny-checkpoint-best-ema.pth pretrain/l2vit-t_vitattn.pth
    # the EMA weights instead of the raw ones
    python tools/model_converters/l2vit2vitattn.py --key model_ema \
        L2ViT-Tiny-checkpoint-best-ema.pth pretrain/l2vit-t-ema_vitattn.pth
"""
import argparse
import os
import os.path as osp
from collections import OrderedDict

import torch
from mmengine.runner.checkpoint import CheckpointLoader

import vitattn_mm  # noqa: F401  (weights-only checkpoint loading)
from vitattn_mm.models.backbones.l2vit import L2ViT
from vitattn_mm.models.layers import unwrap_state_dict


def convert(state_dict):
    """Official L2ViT state dict -> ``backbone.*`` and ``head.fc.*``."""
    if 'downsample_layers.0.proj.proj.0.weight' not in state_dict:
        raise ValueError(
            'not an official L2ViT checkpoint: no '
            'downsample_layers.0.proj.proj.0.weight (first keys: '
            f'{list(state_dict)[:5]})')
    head = {k: v for k, v in state_dict.items() if k.startswith('head.')}
    backbone = L2ViT.convert_checkpoint(
        {k: v for k, v in state_dict.items() if k not in head})
    converted = OrderedDict(
        (f'backbone.{k}', v) for k, v in backbone.items())
    converted.update(
        (f'head.fc.{k[len("head."):]}', v) for k, v in head.items())
    return converted


def parse_args():
    parser = argparse.ArgumentParser(
        description='Convert an official L2ViT checkpoint to vitattn_mm key '
        'names')
    parser.add_argument('src', help='official checkpoint (path or URL)')
    parser.add_argument('dst', help='where to save the converted file')
    parser.add_argument(
        '--key',
        help="container of the weights in SRC, e.g. 'model_ema'; default: "
        "the first of 'state_dict', 'model', 'module'")
    return parser.parse_args()


def main():
    args = parse_args()
    # The official files also pickle the training script's argparse options
    # (plain values) under 'args': allow that type, nothing more.
    with torch.serialization.safe_globals([argparse.Namespace]):
        checkpoint = CheckpointLoader.load_checkpoint(args.src,
                                                      map_location='cpu')
    converted = convert(unwrap_state_dict(checkpoint, args.key))
    if osp.dirname(args.dst):
        os.makedirs(osp.dirname(args.dst), exist_ok=True)
    torch.save({'state_dict': converted}, args.dst)
    print(f'Saved {len(converted)} tensors to {args.dst}')


if __name__ == '__main__':
    main()
