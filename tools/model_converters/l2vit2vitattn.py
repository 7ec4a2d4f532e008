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
import vitattn_mm  # noqa: F401  (weights-only checkpoint loading)
from vitattn_mm.models.backbones.l2vit import L2ViT
from vitattn_tools.converter import converter_main, to_classifier_keys


def convert(state_dict):
    """Official L2ViT state dict -> ``backbone.*`` and ``head.fc.*``."""
    if 'downsample_layers.0.proj.proj.0.weight' not in state_dict:
        raise ValueError(
            'not an official L2ViT checkpoint: no '
            'downsample_layers.0.proj.proj.0.weight (first keys: '
            f'{list(state_dict)[:5]})')
    return to_classifier_keys(state_dict, L2ViT)


if __name__ == '__main__':
    converter_main(convert, 'L2ViT')
