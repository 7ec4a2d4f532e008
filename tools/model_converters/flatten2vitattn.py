"""Convert an official FLatten checkpoint to vitattn_mm's key names.

The released FLatten-Swin / FLatten-PVT / FLatten-PVTv2 / FLatten-CSwin
files (LeapLabTHU/FLatten-Transformer) hold ``{'model': state_dict, ...}``
with the official names (FLatten-CSwin also ``state_dict_ema``: pass
``--key state_dict_ema`` for the EMA weights). FLatten-DeiT was never
released (no code, no weights), so there is no layout of it to convert.
This writes
``{'state_dict': ...}`` with the backbone under ``backbone.`` and the
ImageNet head under ``head.fc.``, which

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
import vitattn_mm  # noqa: F401  (weights-only checkpoint loading)
from vitattn_mm.models.backbones.flatten import (FLattenCSwinTransformer,
                                                 FLattenPVT, FLattenPVTv2,
                                                 FLattenSwinTransformer)
from vitattn_tools.converter import converter_main, to_classifier_keys


def convert(state_dict):
    """Official FLatten state dict -> ``backbone.*`` and ``head.fc.*``."""
    if any(k.startswith('layers.') for k in state_dict):
        backbone_cls = FLattenSwinTransformer
    elif any(k.startswith('block1.') for k in state_dict):
        # PVTv2's FFN has a depthwise conv.
        backbone_cls = FLattenPVTv2 if any(
            '.mlp.dwconv.' in k for k in state_dict) else FLattenPVT
    elif any(k.startswith('stage1_conv_embed.') for k in state_dict):
        backbone_cls = FLattenCSwinTransformer
    else:
        raise ValueError(
            'not an official FLatten-Swin / PVT / PVTv2 / CSwin checkpoint: '
            'no layers.*, block1.* or stage1_conv_embed.* keys (first keys: '
            f'{list(state_dict)[:5]})')
    return to_classifier_keys(state_dict, backbone_cls)


if __name__ == '__main__':
    converter_main(convert, 'FLatten')
