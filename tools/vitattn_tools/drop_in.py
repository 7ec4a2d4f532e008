"""OpenMMLab's own configs with only the backbone's ``type`` changed.

The plug-in promise, checked: every stock mmdet / mmseg / mmpretrain config
of an architecture this package has a skeleton for (Swin, PVT, PVTv2,
ViT/DeiT) builds with each of the package's backbones of that architecture,
and its backbone and neck run at a square and at an odd input size.
"""
import os.path as osp
import re
import time
from dataclasses import dataclass, field
from importlib import import_module
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from mmengine.config import Config
from mmengine.registry import MODELS, DefaultScope

from vitattn_mm.models import backbones

#: (package, config under its ``.mim/configs``) -> the skeleton its backbone
#: is.
STOCK_CONFIGS: Dict[Tuple[str, str], type] = {
    ('mmdet', 'swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py'):
    backbones.AttnSwinTransformer,
    ('mmseg', 'swin/swin-tiny-patch4-window7-in1k-pre_upernet_'
     '8xb2-160k_ade20k-512x512.py'): backbones.AttnSwinTransformer,
    ('mmpretrain', 'swin_transformer/swin-tiny_16xb64_in1k.py'):
    backbones.AttnSwinTransformer,
    ('mmdet', 'pvt/retinanet_pvt-t_fpn_1x_coco.py'): backbones.AttnPVT,
    ('mmdet', 'pvt/retinanet_pvtv2-b0_fpn_1x_coco.py'): backbones.AttnPVTv2,
    ('mmpretrain', 'deit/deit-tiny_4xb256_in1k.py'): backbones.AttnViT,
    ('mmseg', 'vit/vit_deit-s16_upernet_8xb2-80k_ade20k-512x512.py'):
    backbones.AttnViT,
}

SIZES = ((224, 224), (225, 353))


def stock_config(package: str, path: str) -> Config:
    """A config shipped inside an installed OpenMMLab package."""
    root = osp.dirname(import_module(package).__file__)
    return Config.fromfile(osp.join(root, '.mim', 'configs', path))


def backbones_of(skeleton: type) -> List[str]:
    """The package's backbones whose nearest skeleton is ``skeleton``:
    the skeleton itself and the families built on it."""
    skeletons = set(STOCK_CONFIGS.values())
    names = []
    for name in sorted(dir(backbones)):
        cls = getattr(backbones, name)
        if not (isinstance(cls, type) and issubclass(cls, skeleton)):
            continue
        nearest = next(b for b in cls.__mro__ if b in skeletons)
        if nearest is skeleton:
            names.append(name)
    return names


@dataclass
class Cell:
    """One stock config with one backbone type."""
    config: str
    backbone: str
    built: bool = False
    params: Optional[int] = None  # the whole model's
    backbone_params: Optional[int] = None
    shapes: Dict[Tuple[int, int], str] = field(default_factory=dict)
    error: str = ''
    refusal: str = ''  # a keyword value the family cannot honour, named
    seconds: float = 0.

    @property
    def ok(self) -> bool:
        return self.built and len(self.shapes) == len(SIZES) and all(
            not s.startswith('error') for s in self.shapes.values())


def _describe(feats) -> str:
    feats = feats if isinstance(feats, (tuple, list)) else (feats, )
    return ' '.join('x'.join(map(str, f.shape[1:])) for f in feats)


def check_cell(package: str, path: str, backbone: Optional[str],
               sizes: Sequence[Tuple[int, int]] = SIZES) -> Cell:
    """Build ``path``'s model with ``backbone`` as the only change (None:
    the stock one) and run ``extract_feat`` (backbone + neck) at
    ``sizes``."""
    cfg = stock_config(package, path)
    cell = Cell(f'{package}::{path}', backbone or cfg.model.backbone.type)
    start = time.perf_counter()
    cfg.model.backbone.pop('init_cfg', None)  # no download
    cfg.model.pop('init_cfg', None)
    if backbone is not None:
        cfg.model.backbone.type = backbone
    try:
        with DefaultScope.overwrite_default_scope(cfg.default_scope):
            torch.manual_seed(0)
            model = MODELS.build(cfg.model).eval()
        cell.built = True
        cell.params = sum(p.numel() for p in model.parameters())
        cell.backbone_params = sum(
            p.numel() for p in model.backbone.parameters())
        with torch.no_grad():
            for hw in sizes:
                try:
                    feats = model.extract_feat(torch.randn(1, 3, *hw))
                    cell.shapes[hw] = _describe(feats)
                except Exception as e:  # noqa: BLE001 (reported per cell)
                    cell.shapes[hw] = f'error: {type(e).__name__}: {e}'
    except ValueError as e:
        # A refusal names the value it cannot honour (``key=value: why``);
        # anything else is a failure.
        named = re.search(r'\b(\w+=[^:\s]+): (.*)', str(e))
        if named:
            cell.refusal = f'{named.group(1)}: {named.group(2)}'
        else:
            cell.error = f'ValueError: {e}'
    except Exception as e:  # noqa: BLE001 (reported per cell)
        cell.error = f'{type(e).__name__}: {e}'
    cell.seconds = time.perf_counter() - start
    return cell


def check_all(sizes: Sequence[Tuple[int, int]] = SIZES,
              with_stock: bool = True) -> List[Cell]:
    """Every stock config with every backbone of its architecture (and,
    with ``with_stock``, its own backbone first, for reference)."""
    cells = []
    for (package, path), skeleton in STOCK_CONFIGS.items():
        names = ([None] if with_stock else []) + backbones_of(skeleton)
        for name in names:
            cells.append(check_cell(package, path, name, sizes))
    return cells


def render(cells: Sequence[Cell]) -> str:
    """A Markdown table of ``cells``."""
    lines = [
        '| stock config | backbone `type` | builds | ' +
        ' | '.join(f'{h}x{w}' for h, w in SIZES) +
        ' | params (model / backbone) |',
        '|---|---|---|' + '---|' * len(SIZES) + '---|',
    ]
    for cell in cells:
        if cell.refusal:
            shapes = ['-'] * len(SIZES)
            params = '-'
        elif cell.built:
            shapes = [
                'ok' if not cell.shapes.get(hw, 'error').startswith('error')
                else cell.shapes.get(hw, 'not run') for hw in SIZES
            ]
            params = (f'{cell.params / 1e6:.2f}M / '
                      f'{cell.backbone_params / 1e6:.2f}M')
        else:
            shapes = ['-'] * len(SIZES)
            params = '-'
        built = ('yes' if cell.built else
                 f'refuses: {cell.refusal}' if cell.refusal else cell.error)
        lines.append(f'| {cell.config} | {cell.backbone} | {built} | ' +
                     ' | '.join(shapes) + f' | {params} |')
    return '\n'.join(lines)
