"""Files written by earlier versions load into today's classes and give the
outputs those versions computed.

``tests/data/legacy/v0.2``: every registered backbone and skeleton, and the
attention placements users configure (window / token attentions in Swin,
spatial reduction, class-token-free ViTs, dense and banded Less-Attention),
at tiny widths with perturbed weights (no identity initialisation left), as
vitattn_mm 0.2.0 wrote them: the constructor arguments, the state dict, an
odd-sized two-image input, its eval outputs and, for Less-Attention, the
train-mode outputs and ``loss_dp``. The 0.1 files live in
``tests/data/legacy`` (see ``test_skeletons.py``).
"""
import glob
import os.path as osp

import pytest
import torch

from vitattn_mm.models import backbones

V02 = sorted(glob.glob(osp.join(osp.dirname(__file__), 'data', 'legacy',
                                'v0.2', '*.pth')))


def test_files_found():
    assert len(V02) >= 28


@pytest.mark.parametrize('path', V02, ids=lambda p: osp.basename(p)[:-4])
def test_v02_file_loads_strictly_and_computes_the_same(path):
    entry = torch.load(path)
    model = getattr(backbones, entry['cls'])(**entry['kwargs'])
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
