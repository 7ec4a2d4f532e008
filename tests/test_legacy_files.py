"""Files written by earlier versions load into today's classes and give the
outputs those versions computed.

``tests/data/legacy/v0.2``: every registered backbone and skeleton, and the
attention placements users configure (window / token attentions in Swin,
spatial reduction, class-token-free ViTs, dense and banded Less-Attention),
at tiny widths with perturbed weights (no identity initialisation left), as
vitattn_mm 0.2.0 wrote them: the constructor arguments, the state dict, an
odd-sized two-image input, its eval outputs and, for Less-Attention, the
train-mode outputs and ``loss_dp``.

``tests/data/legacy/*.pth``: files written by vitattn_mm 0.1.0, before the
backbones shared a skeleton (FLatten-Swin's merging before its stage and
1x1-conv FFNs, MSF-Swin's ``downsamples``).
"""
import glob
import os.path as osp

import pytest
import torch

from vitattn_mm.models import backbones

#: What the skeletons defaulted to in 0.2, where their defaults became those
#: of OpenMMLab's classes (mmdet's PVT, mmpretrain's ViT).
V02_SKELETON_DEFAULTS = {
    'AttnPVT': dict(sr_ratios=(1, 1, 1, 1), paddings=('corner', ) * 4,
                    out_norm=True, patch_norm_cfg=dict(type='LN')),
    'AttnPVTv2': dict(sr_ratios=(1, 1, 1, 1), patch_norm_cfg=dict(type='LN')),
    'AttnViT': dict(with_cls_token=False, final_norm=False, out_norm=True,
                    out_type='featmap', norm_cfg=dict(type='LN'),
                    patch_bias=True, interpolate_mode='bilinear'),
}

V02 = sorted(glob.glob(osp.join(osp.dirname(__file__), 'data', 'legacy',
                                'v0.2', '*.pth')))


def test_files_found():
    assert len(V02) >= 28


@pytest.mark.parametrize('path', V02, ids=lambda p: osp.basename(p)[:-4])
def test_v02_file_loads_strictly_and_computes_the_same(path):
    entry = torch.load(path)
    kwargs = {**V02_SKELETON_DEFAULTS.get(entry['cls'], {}),
              **entry['kwargs']}
    model = getattr(backbones, entry['cls'])(**kwargs)
    model.load_state_dict(entry['state_dict'], strict=True)
    x = entry['input']
    model.eval()
    with torch.no_grad():
        outs = model(x)
    assert len(outs) == len(entry['outputs'])
    for ours, then in zip(outs, entry['outputs']):
        torch.testing.assert_close(ours, then, rtol=0, atol=2e-5)
    if 'train_outputs' in entry:
        model.train()
        outs = model(x)
        for ours, then in zip(outs, entry['train_outputs']):
            torch.testing.assert_close(ours.detach(), then, rtol=0,
                                       atol=2e-5)
        losses = model.pop_aux_losses()
        assert losses.keys() == entry['train_aux_losses'].keys()
        for key, value in losses.items():
            torch.testing.assert_close(value.detach(),
                                       entry['train_aux_losses'][key],
                                       rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize('name, cls', [
    ('flatten_swin', 'FLattenSwinTransformer'),
    ('msf_swin', 'MSFSwinTransformer'),
    ('flatten_pvt', 'FLattenPVT'),
])
def test_v01_file_loads_as_pretrained_and_as_a_state_dict(
        name, cls, tmp_path):
    """Through ``init_cfg`` (a pretrained file) and through
    ``load_state_dict`` of a detector (resume, ``load_from``), with the
    outputs 0.1 computed."""
    cls = getattr(backbones, cls)
    legacy = torch.load(osp.join(osp.dirname(__file__), 'data', 'legacy',
                                 f'{name}.pth'))
    path = str(tmp_path / 'legacy.pth')
    torch.save({'state_dict': legacy['state_dict']}, path)

    pretrained = cls(**legacy['kwargs'],
                     init_cfg=dict(type='Pretrained', checkpoint=path))
    pretrained.init_weights()
    report = pretrained.load_report
    assert (report.missing, report.unexpected, report.mismatched) == \
        ([], [], [])

    detector = torch.nn.Module()
    detector.backbone = cls(**legacy['kwargs'])
    detector.load_state_dict(legacy['state_dict'], strict=True)

    for model in (pretrained, detector.backbone):
        model.eval()
        with torch.no_grad():
            outs = model(legacy['input'])
        for ours, then in zip(outs, legacy['outputs']):
            torch.testing.assert_close(ours, then, rtol=0, atol=1e-5)
