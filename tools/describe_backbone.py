"""What a backbone builds, stage by stage, read off its description.

Models are preset names, config files (their backbone), ``Type[:arch]`` or
JSON dicts, as ``tools/benchmark.py`` takes them. The stages come from the
class's ``spec()`` (nothing built); the parameter count from a build on
the meta device (no memory, no weights). Examples::

    python tools/describe_backbone.py configs/flatten/mask-rcnn_flatten-swin-t_fpn_1x_coco.py
    python tools/describe_backbone.py LaViT:small
    python tools/describe_backbone.py '{"type": "AttnPVT", "arch": "tiny", "attn_cfgs": {"type": "FocusedLinearAttention"}}'
"""
import argparse

from mmengine.registry import MODELS

import vitattn_mm  # noqa: F401  (registers backbones)
from vitattn_tools.benchmark import backbone_cfg
from vitattn_tools.meta import on_meta_device


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('model', help='preset, config file, Type[:arch] or '
                        'a JSON dict')
    args = parser.parse_args(argv)
    label, cfg = backbone_cfg(args.model)
    with MODELS.switch_scope_and_registry(None) as registry:
        cls = registry.get(cfg['type'])
    spec = cls.spec(**{k: v for k, v in cfg.items() if k != 'type'})
    print(f'{label}\n')
    print('\n'.join(spec.table()))
    with on_meta_device():
        params = sum(p.numel() for p in MODELS.build(cfg).parameters())
    print(f'{cls.__name__}: {params / 1e6:.2f} M parameters')


if __name__ == '__main__':
    main()
