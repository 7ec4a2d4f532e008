"""Convert an official FLatten checkpoint to vitattn_mm's key names.

The released FLatten-Swin / FLatten-PVT / FLatten-PVTv2 files
(LeapLabTHU/FLatten-Transformer) hold ``{'model': state_dict, ...}`` with
the official names. This writes ``{'state_dict': ...}`` with the backbone
under ``backbone.`` and the ImageNet head under ``head.fc.``, which

* the classification configs load with ``load_from`` (e.g. to evaluate the
  released weights with ``tools/test.py``), and
* every FLatten backbone loads with
  ``init_cfg=dict(type='Pretrained', checkpoint=DST)``.

The official file itself loads through ``init_cfg`` too (the backbones
convert on the fly); converting once saves doing it at every start.

Example::

    python tools/model_converters/flatten2vitattn.py \
        flatten_swin_t.pth pretrain/flatten_swin_t_vitattn.pth
"""
import argparse
import os
import os.path as osp
from collections import OrderedDict

import torch
from mmengine.runner.checkpoint import CheckpointLoader

import vitattn_mm  # noqa: F401  (weights-only checkpoint loading)
from vitattn_mm.models.backbones.flatten import (FLattenPVT,
                                                 FLattenSwinTransformer)
from vitattn_mm.models.layers import unwrap_state_dict


def convert(state_dict):
    """Official FLatten state dict -> ``backbone.*`` and ``head.fc.*``."""
    if any(k.startswith('layers.') for k in state_dict):
        backbone_cls = FLattenSwinTransformer
    elif any(k.startswith('block1.') for k in state_dict):
        backbone_cls = FLattenPVT  # PVT and PVTv2 share the converter
    else:
        raise ValueError(
            'not an official FLatten-Swin / PVT / PVTv2 checkpoint: no '
            f'layers.* or block1.* keys (first keys: {list(state_dict)[:5]})')
    head = {k: v for k, v in state_dict.items() if k.startswith('head.')}
    backbone = backbone_cls.convert_checkpoint(
        {k: v for k, v in state_dict.items() if k not in head})
    converted = OrderedDict(
        (f'backbone.{k}', v) for k, v in backbone.items())
    converted.update(
        (f'head.fc.{k[len("head."):]}', v) for k, v in head.items())
    return converted


def parse_args():
    parser = argparse.ArgumentParser(
        description='Convert an official FLatten checkpoint to vitattn_mm '
        'key names')
    parser.add_argument('src', help='official checkpoint (path or URL)')
    parser.add_argument('dst', help='where to save the converted file')
    parser.add_argument(
        '--key',
        help="container of the weights in SRC, e.g. 'state_dict_ema'; "
        "default: the first of 'state_dict', 'model', 'module'")
    return parser.parse_args()


def main():
    args = parse_args()
    checkpoint = CheckpointLoader.load_checkpoint(args.src,
                                                  map_location='cpu')
    converted = convert(unwrap_state_dict(checkpoint, args.key))
    if osp.dirname(args.dst):
        os.makedirs(osp.dirname(args.dst), exist_ok=True)
    torch.save({'state_dict': converted}, args.dst)
    print(f'Saved {len(converted)} tensors to {args.dst}')


if __name__ == '__main__':
    main()
