"""The installed stack is the pinned one, mmcv's compiled ops work, and the
plugin's models resolve from all three downstream registries."""
import importlib.metadata as metadata
import re

import pytest
import torch

import vitattn_mm  # noqa: F401

PINNED = {}
with open('requirements/runtime.txt') as f:
    for line in f:
        match = re.match(r'^([A-Za-z0-9_.-]+)==([^\s#]+)', line)
        if match:
            PINNED[match.group(1)] = match.group(2)


@pytest.mark.parametrize('package', sorted(PINNED))
def test_pinned_versions_installed(package):
    assert metadata.version(package).split('+')[0] == PINNED[package]


def test_mmcv_compiled_ops_run():
    from mmcv.ops import RoIAlign, nms
    assert metadata.version('mmcv') == '2.1.0'
    boxes = torch.tensor([[0., 0., 10., 10.], [1., 1., 10., 10.],
                          [20., 20., 30., 30.]])
    _, keep = nms(boxes, torch.tensor([0.9, 0.8, 0.7]), iou_threshold=0.5)
    assert keep.tolist() == [0, 2]
    feats = torch.arange(16.).view(1, 1, 4, 4)
    rois = torch.tensor([[0., 0., 0., 4., 4.]])
    out = RoIAlign((2, 2), spatial_scale=1.0, sampling_ratio=2)(feats, rois)
    assert out.shape == (1, 1, 2, 2)
    assert out.mean().item() == pytest.approx(feats.mean().item(), abs=0.5)


def test_backbones_resolve_in_every_scope():
    from mmdet.registry import MODELS as DET
    from mmpretrain.registry import MODELS as CLS
    from mmseg.registry import MODELS as SEG
    from vitattn_mm.models import backbones
    names = [n for n in dir(backbones) if n[0].isupper()]
    assert names, 'no backbone is exported'
    for registry in (DET, SEG, CLS):
        for name in names:
            assert registry.get(name) is getattr(backbones, name), (
                f'{name} missing from {registry.scope}')
