"""Convert an official MSF (SimpleViT) checkpoint to vitattn_mm's key names.

The official code (tk1980/MSFtransformer, torchvision's classification
reference) saves ``{'model': state_dict, ...}`` of a ``SimpleViTflexAtt``
(``SimpleViTS_msf``, ``SimpleViTS_msf-g2``, ``SimpleViTS_orig`` ...). This
writes ``{'state_dict': ...}`` with the backbone under ``backbone.`` and the
ImageNet head under ``head.fc.``, which

* the classification configs load with ``load_from`` (e.g. to evaluate the
  official weights with ``tools/test.py`` and
  ``configs/msf/msf-vit-s_4xb256-300e_in1k.py``), and
* every MSFViT backbone (e.g. SETR's) loads with
  ``init_cfg=dict(type='Pretrained', checkpoint=DST)``.

The official file itself loads through ``init_cfg`` too (MSFViT converts on
the fly); converting once saves doing it at every start. Grouped (``-g2``)
and softmax (``orig``) checkpoints convert alike: pick the config with the
matching ``groups`` / ``mean_shift``.

Example::

    python tools/model_converters/msf2vitattn.py \
        SimpleViTS_msf/checkpoint.pth pretrain/msf-vit-s_in1k.pth
"""
from collections import OrderedDict

import vitattn_mm  # noqa: F401  (weights-only checkpoint loading)
from vitattn_mm.models.backbones.vit import convert_simple_vit
from vitattn_tools.converter import converter_main


def convert(state_dict):
    """Official SimpleViT state dict -> ``backbone.*`` and ``head.fc.*``."""
    if not any(k.startswith('transformer.layers.') for k in state_dict):
        raise ValueError(
            'not an official MSF SimpleViT checkpoint: no '
            f'transformer.layers.* keys (first keys: {list(state_dict)[:5]})')
    converted = OrderedDict()
    # Simple ViT's layout is the ViT skeleton's: no block depends on arch.
    for key, value in convert_simple_vit(state_dict).items():
        converted[key if key.startswith('head.') else f'backbone.{key}'] = \
            value
    return converted


if __name__ == '__main__':
    converter_main(convert, 'MSF')
