"""Checkpoints: mmengine's own files load weights-only, crafted files are
refused, and pretrained backbone loading reports (or refuses) loudly."""
import os
import os.path as osp
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
from mmengine.logging import HistoryBuffer
from mmengine.model import BaseModel
from mmengine.runner import Runner
from mmengine.runner.checkpoint import CheckpointLoader

import vitattn_mm  # noqa: F401  (installs the safe loader)
from vitattn_mm.models.layers import (ResizablePosEmbed, StagedBackbone,
                                      load_pretrained)
from vitattn_mm.utils.checkpoint import UnsafeCheckpointError


class ToyModel(BaseModel):

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(2, 1)

    def forward(self, inputs, labels=None, mode='loss'):
        out = self.linear(inputs)
        if mode == 'loss':
            return dict(loss=((out - labels)**2).mean())
        return out


class ToyData(torch.utils.data.Dataset):

    def __len__(self):
        return 8

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return dict(inputs=torch.randn(2, generator=g),
                    labels=torch.randn(1, generator=g))


def toy_runner(work_dir, max_epochs, resume=False):
    return Runner(
        model=ToyModel(),
        work_dir=str(work_dir),
        train_dataloader=dict(
            dataset=ToyData(),
            sampler=dict(type='DefaultSampler', shuffle=True),
            batch_size=2,
            collate_fn=dict(type='default_collate')),
        optim_wrapper=dict(optimizer=dict(type='AdamW', lr=0.01)),
        param_scheduler=[
            dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0,
                 end=3)
        ],
        train_cfg=dict(by_epoch=True, max_epochs=max_epochs),
        default_hooks=dict(checkpoint=dict(type='CheckpointHook',
                                           interval=1)),
        resume=resume,
        experiment_name=f'toy_{max_epochs}_{resume}_{os.getpid()}')


@pytest.fixture(scope='module')
def mmengine_checkpoint(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp('toy')
    toy_runner(work_dir, max_epochs=1).train()
    return work_dir, osp.join(work_dir, 'epoch_1.pth')


def test_mmengine_checkpoint_loads_weights_only(mmengine_checkpoint):
    _, path = mmengine_checkpoint
    # Stock torch (weights_only default) cannot read what mmengine wrote ...
    stock = subprocess.run(
        [sys.executable, '-c', f'import torch; torch.load({path!r})'],
        capture_output=True, text=True)
    assert stock.returncode != 0 and 'Weights only load failed' in stock.stderr
    # ... and loads through mmengine's loader, message hub included.
    checkpoint = CheckpointLoader.load_checkpoint(path, 'cpu')
    buffer = checkpoint['message_hub']['log_scalars']['train/loss']
    assert isinstance(buffer, HistoryBuffer)
    assert buffer.mean() == pytest.approx(buffer._log_history.mean())
    assert 'linear.weight' in checkpoint['state_dict']


def test_resume_continues_from_checkpoint(mmengine_checkpoint):
    work_dir, _ = mmengine_checkpoint
    runner = toy_runner(work_dir, max_epochs=2, resume=True)
    runner.train()
    assert runner.iter == 8  # 4 resumed + 4 new iterations
    assert osp.isfile(osp.join(work_dir, 'epoch_2.pth'))


class _RunsCode:

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f'touch {self.marker}', ))


class _ReachesAttributes:

    def __reduce__(self):
        return (getattr, (HistoryBuffer, '__init__'))


@pytest.mark.parametrize('payload', ['system', 'getattr'])
def test_crafted_checkpoint_is_refused(tmp_path, payload):
    marker = tmp_path / 'executed'
    path = str(tmp_path / 'evil.pth')
    obj = _RunsCode(marker) if payload == 'system' else _ReachesAttributes()
    torch.save({'state_dict': {'w': torch.zeros(1)}, 'extra': obj}, path)
    with pytest.raises(UnsafeCheckpointError, match='Refusing to load'):
        CheckpointLoader.load_checkpoint(path, 'cpu')
    assert not marker.exists(), 'the payload ran'


class TinyBackbone(StagedBackbone):
    """Two layers and a positional embedding, official names differ."""

    def __init__(self, init_cfg=None):
        super().__init__(1, 0, init_cfg=init_cfg)
        self.stem = nn.Conv2d(3, 4, 3)
        self.pos_embed = ResizablePosEmbed(4, (4, 4))
        self.norm = nn.LayerNorm(4)

    @classmethod
    def convert_checkpoint(cls, state_dict):
        return {k.replace('patch_embed.', 'stem.'): v
                for k, v in state_dict.items()}

    def forward(self, x):
        return x


def _official_state_dict():
    return {
        'patch_embed.weight': torch.randn(4, 3, 3, 3),
        'patch_embed.bias': torch.randn(4),
        'pos_embed.weight': torch.randn(1, 64, 4),  # 8x8 grid
        'norm.weight': torch.randn(4),
        'norm.bias': torch.randn(4),
        'head.weight': torch.randn(10, 4),
    }


def test_pretrained_official_file_loads_everything(tmp_path):
    official = _official_state_dict()
    path = str(tmp_path / 'official.pth')
    torch.save({'model': official, 'epoch': 300}, path)
    model = TinyBackbone(init_cfg=dict(type='Pretrained', checkpoint=path))
    model.init_weights()
    report = model.load_report
    assert report.missing == []
    assert report.unexpected == ['head.weight']
    torch.testing.assert_close(model.stem.weight,
                               official['patch_embed.weight'])
    # 8x8 grid resized to the model's 4x4
    assert model.pos_embed.weight.shape == (1, 16, 4)


def test_pretrained_detector_checkpoint_prefix_is_stripped(tmp_path):
    source = TinyBackbone()
    path = str(tmp_path / 'detector.pth')
    torch.save({'state_dict': {f'backbone.{k}': v
                               for k, v in source.state_dict().items()}},
               path)
    model = TinyBackbone()
    report = load_pretrained(model, path)
    assert report.missing == [] and report.unexpected == []
    torch.testing.assert_close(model.norm.weight, source.norm.weight)


def test_pretrained_nothing_matches_raises(tmp_path):
    path = str(tmp_path / 'other.pth')
    torch.save({'model': {'fc.weight': torch.zeros(2, 2)}}, path)
    model = TinyBackbone(init_cfg=dict(type='Pretrained', checkpoint=path))
    with pytest.raises(RuntimeError, match='matches none'):
        model.init_weights()


def test_pretrained_shape_mismatch_is_reported_not_loaded(tmp_path):
    state = TinyBackbone().state_dict()
    state['norm.weight'] = torch.zeros(7)
    path = str(tmp_path / 'mismatch.pth')
    torch.save(state, path)
    model = TinyBackbone()
    before = model.norm.weight.clone()
    report = load_pretrained(model, path)
    assert report.mismatched and report.mismatched[0].startswith('norm.weight')
    torch.testing.assert_close(model.norm.weight, before)
