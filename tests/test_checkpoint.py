"""Checkpoints: mmengine's own files load weights-only, crafted files are
refused, pretrained backbone loading reports (or refuses) loudly, and every
loader takes the one checkpoint path (official layouts converted, position
tables resized)."""
import os
import os.path as osp
import pickle
import re
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
from mmengine.logging import HistoryBuffer
from mmengine.model import BaseModel
from mmengine.runner import Runner
from mmengine.runner.checkpoint import CheckpointLoader
from tiny_backbones import build_tiny

import vitattn_mm  # noqa: F401  (allows mmengine's data types)
from vitattn_mm.models.backbones.base_backbone import StagedBackbone
from vitattn_mm.models.backbones.packages import mmpretrain
from vitattn_mm.models.layers import ResizablePosEmbed, resize_pos_embed
from vitattn_mm.models.checkpoint.pretrained import load_pretrained
from vitattn_mm.models.checkpoint.files import (UnsafeCheckpointError,
                                         load_checkpoint_file)


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
    """By mmengine's own loader (torch's weights-only default, nothing
    patched) and, naming what it needs, by ours."""
    marker = tmp_path / 'executed'
    path = str(tmp_path / 'evil.pth')
    obj = _RunsCode(marker) if payload == 'system' else _ReachesAttributes()
    torch.save({'state_dict': {'w': torch.zeros(1)}, 'extra': obj}, path)
    with pytest.raises(pickle.UnpicklingError):
        CheckpointLoader.load_checkpoint(path, 'cpu')
    with pytest.raises(UnsafeCheckpointError, match='Refusing to load'):
        load_checkpoint_file(path)
    assert not marker.exists(), 'the payload ran'


def test_importing_the_package_patches_no_loader():
    """Loading is weights-only by torch's default; the package only adds
    the data types mmengine's files hold to torch's allowlist."""
    code = ('from mmengine.runner.checkpoint import CheckpointLoader as C;'
            'before = dict(C._schemes); import vitattn_mm;'
            'assert dict(C._schemes) == before')
    subprocess.run([sys.executable, '-c', code], check=True)


class TinyBackbone(StagedBackbone):
    """Two layers and a positional embedding, official names differ."""

    def __init__(self, init_cfg=None):
        super().__init__(1, 0, init_cfg=init_cfg)
        self.stem = nn.Conv2d(3, 4, 3)
        self.pos_embed = ResizablePosEmbed(4, (4, 4))
        self.norm = nn.LayerNorm(4)

    def convert_official(self, state_dict):
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


def test_the_stock_version_slot_is_not_ours():
    """mmpretrain's Swin saves ``version=3`` in the module's metadata slot;
    this package records its layout under a key of its own, so such a file
    is still migrated (mmpretrain's version-1 final ``norm`` ->
    ``norm{last}``) and loads strictly."""
    torch.manual_seed(0)
    source = build_tiny('AttnSwinTransformer')
    state = source.state_dict()
    stock = type(state)((re.sub(r'^norm3\.', 'norm.', k), v)
                        for k, v in state.items())
    stock._metadata = type(state._metadata)((name, {'version': 3})
                                            for name in state._metadata)
    target = build_tiny('AttnSwinTransformer')
    target.load_state_dict(stock, strict=True)
    torch.testing.assert_close(target.norm3.weight, source.norm3.weight)


def test_files_of_unreleased_layouts_are_not_migrated():
    """0.3's and 0.4's layouts were never released: a ViT table saved as
    0.4's ``pos_embed.weight``, or 0.3's first-stage patch embedding, is
    not renamed (the load reports it unexpected)."""
    torch.manual_seed(0)
    state = build_tiny('AttnViT').state_dict()
    old = type(state)((('pos_embed.weight' if k == 'pos_embed' else k), v)
                      for k, v in state.items())
    result = build_tiny('AttnViT').load_state_dict(old, strict=False)
    assert result.missing_keys == ['pos_embed']
    assert result.unexpected_keys == ['pos_embed.weight']


def test_a_non_square_position_table_resizes_or_is_refused_by_name(
        tmp_path):
    """A table learned on a non-square grid of the model's aspect ratio is
    resized (48x64 tokens -> 24x32); one whose length fits no grid is
    refused naming it, not reported as a shape mismatch."""
    build = TABLES['vit'][0]
    small = mmpretrain.AttnViT(arch=dict(embed_dims=16, num_layers=1,
                                         num_heads=1), img_size=(384, 512),
                               patch_size=16)
    large = mmpretrain.AttnViT(arch=dict(embed_dims=16, num_layers=1,
                                         num_heads=1), img_size=(768, 1024),
                               patch_size=16)
    state = small.state_dict()
    large.load_state_dict(state, strict=True)
    expected = resize_pos_embed(state['pos_embed'], (24, 32), (48, 64),
                                'bicubic', 1)
    torch.testing.assert_close(large.pos_embed, expected)
    state['pos_embed'] = state['pos_embed'][:, :-5]
    with pytest.raises(ValueError, match='cannot resize the pos_embed of '
                       r'shape \(1, 764, 16\)'):
        build(224).load_state_dict(state, strict=False)


def test_convert_weights_false_loads_no_official_layout(tmp_path):
    """mmdet's switch, honoured: without it an official file is not
    converted, so it fills nothing and is refused; our own layout loads."""
    path = str(tmp_path / 'official.pth')
    torch.save({'model': _official_state_dict()}, path)

    class Unconverted(TinyBackbone):

        def __init__(self, init_cfg=None):
            super().__init__(init_cfg)
            self.convert_weights = False

    model = Unconverted(init_cfg=dict(type='Pretrained', checkpoint=path))
    with pytest.raises(RuntimeError, match='fills only|matches none'):
        model.init_weights()
    model.load_state_dict(TinyBackbone().state_dict())


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


def test_pretrained_shape_mismatch_is_refused_or_reported(tmp_path):
    """A tensor of another shape leaves a backbone parameter random:
    refused by name; asked for a partial load, it is reported and not
    loaded."""
    state = TinyBackbone().state_dict()
    state['norm.weight'] = torch.zeros(7)
    path = str(tmp_path / 'mismatch.pth')
    torch.save(state, path)
    model = TinyBackbone()
    before = model.norm.weight.clone()
    with pytest.raises(RuntimeError, match='leaves 1 backbone parameters .*'
                       'at their random initial values: norm.weight'):
        load_pretrained(model, path)
    report = load_pretrained(model, path, min_loaded_ratio=0)
    assert report.mismatched and report.mismatched[0].startswith('norm.weight')
    torch.testing.assert_close(model.norm.weight, before)


# ------------------------------------------- every loader, one path
class Classifier(BaseModel):
    """A backbone and a loss: enough for a Runner to train, save, load and
    resume it."""

    def __init__(self, backbone):
        super().__init__()
        self.backbone = backbone

    def forward(self, inputs, labels=None, mode='loss'):
        loss = sum(o.float().mean() for o in self.backbone(inputs))
        return dict(loss=loss) if mode == 'loss' else [loss]


class Images(torch.utils.data.Dataset):

    def __init__(self, size):
        self.size = size

    def __len__(self):
        return 2

    def __getitem__(self, i):
        return dict(inputs=torch.randn(3, self.size, self.size))


def _runner(work_dir, backbone, size, **kwargs):
    return Runner(
        model=Classifier(backbone),
        work_dir=str(work_dir),
        train_dataloader=dict(
            dataset=Images(size), batch_size=1,
            sampler=dict(type='DefaultSampler', shuffle=False),
            collate_fn=dict(type='default_collate')),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.)),
        train_cfg=dict(by_epoch=False, max_iters=1),
        default_hooks=dict(checkpoint=dict(type='CheckpointHook',
                                           interval=1, by_epoch=False)),
        experiment_name=f'resize_{os.getpid()}_{len(os.listdir(work_dir))}',
        **kwargs)


#: Backbones with learned position tables, as mmpretrain's test builds
#: them: Swin's ``absolute_pos_embed`` (a bare parameter, bicubic) and
#: ViT's ``pos_embed`` (with its class-token row, bicubic).
TABLES = {
    'swin': (lambda size: mmpretrain.AttnSwinTransformer(
        arch=dict(embed_dims=16, depths=[1, 1, 1, 1], num_heads=[1, 1, 2, 2]),
        img_size=size, use_abs_pos_embed=True, window_size=4,
        drop_path_rate=0.), 'absolute_pos_embed', 4, 0),
    'vit': (lambda size: mmpretrain.AttnViT(
        arch=dict(embed_dims=16, num_layers=1, num_heads=1), img_size=size,
        patch_size=16), 'pos_embed', 16, 1),
}


@pytest.mark.parametrize('name', list(TABLES))
def test_a_224_file_loads_into_a_384_model_through_every_loader(
        name, tmp_path):
    """mmpretrain's ``test_init_weights``: the table of a file written at
    ``img_size=224`` is resized to a model built at 384 by ``init_cfg``,
    mmengine's ``load_checkpoint``, ``load_from`` and ``resume`` alike."""
    from mmengine.runner import load_checkpoint
    build, key, patch, extra = TABLES[name]
    torch.manual_seed(0)
    work_dir = tmp_path / 'train_224'
    work_dir.mkdir()
    runner = _runner(work_dir, build(224), 224)
    runner.train()  # writes iter_1.pth, a whole training checkpoint
    trained = osp.join(work_dir, 'iter_1.pth')
    source = runner.model.backbone.state_dict()[key]
    backbone_file = str(tmp_path / 'backbone_224.pth')
    torch.save(runner.model.backbone.state_dict(), backbone_file)
    src, dst = 224 // patch, 384 // patch
    expected = resize_pos_embed(source, (src, src), (dst, dst), 'bicubic',
                                extra)

    loaded = {}
    model = build(384)
    model.init_cfg = dict(type='Pretrained', checkpoint=backbone_file)
    model.init_weights()
    loaded['init_cfg'] = model
    model = build(384)
    load_checkpoint(model, backbone_file, strict=True)
    loaded['load_checkpoint'] = model
    for how in ('load_from', 'resume'):
        other = tmp_path / how
        other.mkdir()
        runner = _runner(other, build(384), 384, load_from=trained,
                         resume=how == 'resume')
        if how == 'resume':  # resume needs the optimizer the run builds
            runner.optim_wrapper = runner.build_optim_wrapper(
                runner.optim_wrapper)
        runner.load_or_resume()
        loaded[how] = runner.model.backbone
        if how == 'resume':
            assert runner.iter == 1
    for how, model in loaded.items():
        table = model.state_dict()[key]
        assert table.shape == expected.shape, how
        torch.testing.assert_close(table, expected, msg=how)


@pytest.mark.parametrize('how', ['init_cfg', 'load_checkpoint', 'load_from',
                                 'resume'])
def test_a_file_is_adapted_once_per_load(how, tmp_path, monkeypatch):
    """Every loader adapts a file of another layout once: ``load_from`` and
    ``resume`` in ``CheckpointCheckHook``, which hands the Runner the
    adapted tensors marked as adapted, so the backbone's own load hook
    does not convert them again. Counted at the converter."""
    from mmengine.runner import load_checkpoint

    from vitattn_mm.models.checkpoint.adapt import LAYOUT_KEY
    build = TABLES['swin'][0]
    torch.manual_seed(0)
    work_dir = tmp_path / 'train'
    work_dir.mkdir()
    runner = _runner(work_dir, build(224), 224)
    runner.train()
    # A file that does not record this package's layout (as a stock
    # class's or an official one): every load must adapt it.
    trained = torch.load(osp.join(work_dir, 'iter_1.pth'),
                         weights_only=False)
    for meta in trained['state_dict']._metadata.values():
        meta.pop(LAYOUT_KEY, None)
    foreign = str(tmp_path / 'foreign.pth')
    torch.save(trained, foreign)
    backbone_file = str(tmp_path / 'backbone.pth')
    torch.save(type(trained['state_dict'])(
        (k[len('backbone.'):], v) for k, v in trained['state_dict'].items()),
        backbone_file)

    calls = []
    cls = type(build(224))
    convert = cls.convert_official
    monkeypatch.setattr(cls, 'convert_official',
                        lambda self, sd: calls.append(1) or convert(self, sd))
    if how == 'init_cfg':
        model = build(224)
        model.init_cfg = dict(type='Pretrained', checkpoint=backbone_file)
        model.init_weights()
    elif how == 'load_checkpoint':
        load_checkpoint(build(224), backbone_file, strict=True)
    else:
        other = tmp_path / how
        other.mkdir()
        runner = _runner(other, build(224), 224, load_from=foreign,
                         resume=how == 'resume',
                         custom_hooks=[dict(type='CheckpointCheckHook')])
        if how == 'resume':
            runner.optim_wrapper = runner.build_optim_wrapper(
                runner.optim_wrapper)
        runner.load_or_resume()
    assert len(calls) == 1
