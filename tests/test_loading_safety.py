"""Loading holes a new user runs into: whole-model loads that would leave
the model random are refused, partial pretrained loads raise, the official
training scripts' save formats load weights-only, unloadable files say what
they are, and bad backbone settings fail loudly."""
import argparse
import os
import pickle
import subprocess
import sys
import types

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope
from mmengine.runner import Runner
from mmengine.runner.checkpoint import CheckpointLoader
from test_msf import OFFICIAL, official_state_dict

import vitattn_mm  # noqa: F401  (allows mmengine's data types)
from tiny_backbones import ARCHS
from vitattn_mm.engine import CheckpointCheckHook
from vitattn_mm.models.backbones.flatten import (FLattenPVT,
                                                 FLattenSwinTransformer)
from vitattn_mm.models.backbones.l2vit import L2ViT
from vitattn_mm.models.backbones.lavit import LaViT
from vitattn_mm.models.backbones.msf import MSFSwinTransformer, MSFViT
from vitattn_mm.models.checkpoint.files import (InvalidCheckpointError,
                                         UnsafeCheckpointError,
                                         load_checkpoint_file)
from vitattn_tools.converter import converter_main
from vitattn_tools.runtime import load_tool_config

MSF_CONFIG = 'configs/msf/msf-vit-s_4xb256-300e_in1k.py'

#: Each backbone class with its tiny arch from tests/tiny_backbones.py (4
#: stages; MSFViT: 3 blocks).
BACKBONES = {
    'FLattenSwinTransformer': (FLattenSwinTransformer, ARCHS['swin-1221']),
    'FLattenPVT': (FLattenPVT, ARCHS['pvt-1221']),
    'L2ViT': (L2ViT, ARCHS['l2vit-2222']),
    'LaViT': (LaViT, ARCHS['lavit-1232']),
    'MSFSwinTransformer': (MSFSwinTransformer, ARCHS['swin-1221']),
    'MSFViT': (MSFViT, ARCHS['vit-3']),
}


def build(name, **kwargs):
    cls, arch = BACKBONES[name]
    return cls(arch, **kwargs)


# ------------------------------------------ 1. whole-model loads (Runner)
def msf_classifier():
    """The MSF classification config's model at the official test size."""
    from mmpretrain.registry import MODELS
    init_default_scope('mmpretrain')
    cfg = Config.fromfile(MSF_CONFIG)
    cfg.model.backbone.arch = dict(ARCHS['msf-simplevit-2'])
    cfg.model.head.update(in_channels=OFFICIAL['dim'],
                          num_classes=OFFICIAL['classes'])
    return MODELS.build(cfg.model)


def load_through_runner(tmp_path, checkpoint, **cfg):
    """What tools/test.py and load_from do: the Runner loads the file."""
    model = msf_classifier()
    runner = Runner(
        model=model,
        work_dir=str(tmp_path / 'work_dir'),
        load_from=checkpoint,
        custom_hooks=[dict(type='CheckpointCheckHook')],
        cfg=Config(dict(load_from=checkpoint, **cfg)),
        experiment_name=f'load_{os.getpid()}_{len(os.listdir(tmp_path))}')
    runner.load_or_resume()
    return model


@pytest.fixture
def official_msf(tmp_path):
    """An official MSF training checkpoint (torchvision reference format)."""
    state = official_state_dict(groups=1)
    path = str(tmp_path / 'checkpoint.pth')
    torch.save({'model': state, 'epoch': 299,
                'args': argparse.Namespace(model='SimpleViTS_msf', lr=1e-3)},
               path)
    return path, state


def test_runner_refuses_official_file_with_converter_command(
        tmp_path, official_msf):
    path, _ = official_msf
    with pytest.raises(RuntimeError) as error:
        load_through_runner(tmp_path, path)
    message = str(error.value)
    assert 'matches none of the' in message
    assert 'official MSFViT release' in message
    assert (f'python tools/model_converters/msf2vitattn.py {path} '
            f'{path[:-4]}_vitattn.pth') in message


def test_runner_loads_the_converted_official_file(tmp_path, official_msf):
    path, state = official_msf
    converted = str(tmp_path / 'converted.pth')
    from test_msf import load_converter
    converter_main(load_converter().convert, 'MSF', [path, converted])
    model = load_through_runner(tmp_path, converted)
    torch.testing.assert_close(model.head.fc.weight,
                               state['linear_head.1.weight'])


def test_runner_refuses_unrelated_file(tmp_path):
    path = str(tmp_path / 'resnet.pth')
    torch.save({'state_dict': {'conv1.weight': torch.zeros(64, 3, 7, 7)}},
               path)
    with pytest.raises(RuntimeError, match='matches none of the'):
        load_through_runner(tmp_path, path)


def test_runner_refuses_mostly_unloaded_model_unless_allowed(tmp_path):
    full = msf_classifier().state_dict()
    head_only = {k: v for k, v in full.items() if not k.startswith('backbone')}
    path = str(tmp_path / 'head_only.pth')
    torch.save({'state_dict': head_only}, path)
    with pytest.raises(RuntimeError) as error:
        load_through_runner(tmp_path, path)
    total = len(full)
    assert (f'fills only {len(head_only)} of the {total} ImageClassifier '
            'tensors') in str(error.value)
    assert f'{total - len(head_only)} missing' in str(error.value)
    assert 'allow_partial_load = True' in str(error.value)

    model = load_through_runner(tmp_path, path, allow_partial_load=True)
    torch.testing.assert_close(model.head.fc.weight,
                               head_only['head.fc.weight'])


def test_tools_add_the_check_once():
    cfg = load_tool_config(MSF_CONFIG)
    types_ = [hook['type'] for hook in cfg.custom_hooks]
    assert types_.count('CheckpointCheckHook') == 1
    cfg = load_tool_config(MSF_CONFIG, cfg_options={
        'custom_hooks': [dict(type='CheckpointCheckHook', min_loaded_ratio=0)]
    })
    assert cfg.custom_hooks == [
        dict(type='CheckpointCheckHook', min_loaded_ratio=0)]


@pytest.mark.slow
def test_test_py_refuses_official_file_and_evaluates_converted(
        tmp_path, official_msf, demo_data):
    """The user's command: tools/test.py CONFIG OFFICIAL_FILE."""
    path, _ = official_msf
    config = tmp_path / 'msf_official_size.py'
    config.write_text(
        f'_base_ = [{os.path.abspath(MSF_CONFIG)!r}]\n'
        'model = dict(backbone=dict(arch=dict(_delete_=True, embed_dims='
        f'{OFFICIAL["dim"]}, depth={OFFICIAL["depth"]}, num_heads='
        f'{OFFICIAL["heads"]})), head=dict(in_channels={OFFICIAL["dim"]}))\n')

    def test_py(checkpoint):
        return subprocess.run(
            [sys.executable, 'tools/test.py', str(config), checkpoint,
             '--demo', demo_data, '--work-dir', str(tmp_path),
             '--cfg-options', 'test_dataloader.dataset.indices=4'],
            capture_output=True, text=True)

    result = test_py(path)
    assert result.returncode != 0
    assert 'python tools/model_converters/msf2vitattn.py' in result.stderr
    assert 'accuracy/top1' not in result.stdout + result.stderr

    converted = str(tmp_path / 'converted.pth')
    subprocess.run([sys.executable, 'tools/model_converters/msf2vitattn.py',
                    path, converted], check=True, capture_output=True)
    result = test_py(converted)
    assert result.returncode == 0, result.stderr[-2000:]
    assert 'accuracy/top1' in result.stdout + result.stderr


# ------------------------------------------------ 2. partial init_cfg loads
def test_pretrained_cross_family_partial_load_raises(tmp_path):
    """A FLatten-PVT file of LaViT's widths (one block per stage, its MLP
    ratio 4) fills many of LaViT's small tensors (norms, biases) but few of
    its weights."""
    path = str(tmp_path / 'flatten_pvt.pth')
    widths = {k: v for k, v in ARCHS['lavit-1232'].items()
              if k in ('embed_dims', 'num_heads')}
    flatten = FLattenPVT(dict(widths, depths=[1] * 4, mlp_ratios=[4] * 4))
    torch.save({'model': flatten.state_dict()}, path)
    model = build('LaViT', init_cfg=dict(type='Pretrained', checkpoint=path))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(RuntimeError, match=r'fills only \d+ of the \d+ LaViT '
                       r'tensors, \d+% of its weights \(below '
                       r'min_loaded_ratio=0.5\)'):
        model.init_weights()
    for key, value in model.state_dict().items():  # nothing was loaded
        torch.testing.assert_close(value, before[key])


def test_pretrained_partial_load_allowed_explicitly(tmp_path):
    source = build('L2ViT')
    stage0 = {k: v for k, v in source.state_dict().items()
              if k.startswith('stages.0.')}
    path = str(tmp_path / 'stage0.pth')
    torch.save({'state_dict': stage0}, path)
    with pytest.raises(RuntimeError, match='fills only'):
        build('L2ViT', init_cfg=dict(type='Pretrained',
                                     checkpoint=path)).init_weights()
    model = build('L2ViT', init_cfg=dict(type='Pretrained', checkpoint=path,
                                         min_loaded_ratio=0))
    model.init_weights()
    assert sorted(model.load_report.loaded) == sorted(
        k for k in stage0 if not k.endswith('num_batches_tracked'))
    torch.testing.assert_close(model.stages[0].blocks[0].attn.w_msa.qkv.weight,
                               source.stages[0].blocks[0].attn.w_msa.qkv
                               .weight)


# ------------------------------------- 3. the official save formats load
@pytest.fixture
def yacs_cfgnode(monkeypatch):
    """A stand-in of yacs's ``CfgNode`` under its real module path (yacs is
    not installed here): a dict with yacs's bookkeeping attributes."""

    class CfgNode(dict):

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.__dict__.update({
                '__immutable__': True, '__deprecated_keys__': set(),
                '__renamed_keys__': {}, '__new_allowed__': False})

    package = types.ModuleType('yacs')
    module = types.ModuleType('yacs.config')
    CfgNode.__module__, CfgNode.__qualname__ = 'yacs.config', 'CfgNode'
    module.CfgNode, package.config = CfgNode, module
    monkeypatch.setitem(sys.modules, 'yacs', package)
    monkeypatch.setitem(sys.modules, 'yacs.config', module)
    return CfgNode


def official_extras(family, yacs_cfgnode):
    """What each official training script saves beside ``model``."""
    if family == 'FLatten':  # Swin's save_checkpoint
        config = yacs_cfgnode(MODEL=yacs_cfgnode(TYPE='flatten_swin',
                                                 DROP_PATH_RATE=0.2),
                              TRAIN=yacs_cfgnode(EPOCHS=300, BASE_LR=1e-3))
        return dict(config=config, max_accuracy=82.1, epoch=299,
                    lr_scheduler=dict(t_initial=300, base_values=[1e-3]))
    # L2ViT (ConvNeXt's save_model) and MSF (torchvision's reference)
    return dict(args=argparse.Namespace(model=f'{family}_official',
                                        drop_path=0.1, lr=[1e-3]),
                epoch=299, scaler=dict(scale=65536.0, growth_factor=2.0))


@pytest.mark.parametrize('family,backbone',
                         [('FLatten', 'FLattenSwinTransformer'),
                          ('FLatten', 'FLattenPVT'), ('L2ViT', 'L2ViT'),
                          ('MSF', 'MSFViT')])
def test_official_training_checkpoint_loads_weights_only(
        tmp_path, monkeypatch, yacs_cfgnode, family, backbone):
    weights = build(backbone).state_dict()
    path = str(tmp_path / 'ckpt_epoch_299.pth')
    torch.save({'model': weights, **official_extras(family, yacs_cfgnode)},
               path)
    # Loading needs neither yacs nor any other code.
    monkeypatch.delitem(sys.modules, 'yacs')
    monkeypatch.delitem(sys.modules, 'yacs.config')

    model = build(backbone, init_cfg=dict(type='Pretrained', checkpoint=path))
    model.init_weights()
    assert model.load_report.missing == []
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, weights[key])
    # The shared converter command line reads the same file.
    dst = str(tmp_path / 'converted.pth')
    converter_main(lambda state_dict: state_dict, family, [path, dst])
    assert torch.load(dst)['state_dict'].keys() == weights.keys()
    assert 'yacs' not in sys.modules

    if family == 'FLatten':  # the options come back as plain dicts
        config = CheckpointLoader.load_checkpoint(path)['config']
        assert config['MODEL']['DROP_PATH_RATE'] == 0.2
        assert config.__dict__['__immutable__'] is True


# ------------------------------------------ 4. unloadable files described
class _Unknown:
    """A class no weights file holds, under a long module path."""


@pytest.fixture
def unknown_class(monkeypatch):
    package = types.ModuleType('trainer_lib')
    module = types.ModuleType('trainer_lib.training_state')
    _Unknown.__module__ = 'trainer_lib.training_state'
    _Unknown.__qualname__ = 'TrainingStateSnapshot'
    module.TrainingStateSnapshot, package.training_state = _Unknown, module
    monkeypatch.setitem(sys.modules, 'trainer_lib', package)
    monkeypatch.setitem(sys.modules, 'trainer_lib.training_state', module)
    return _Unknown


def _write(path, kind):
    good = {'state_dict': {'w': torch.zeros(64)}}
    if kind == 'empty':
        open(path, 'wb').close()
    elif kind == 'random':
        with open(path, 'wb') as f:
            f.write(bytes(range(7, 256)) * 16)
    elif kind == 'plain pickle':
        with open(path, 'wb') as f:
            pickle.dump({'w': [0.0, 1.0]}, f)
    elif kind in ('truncated', 'truncated legacy'):
        torch.save(good, path,
                   _use_new_zipfile_serialization=kind == 'truncated')
        with open(path, 'rb') as f:
            data = f.read()
        with open(path, 'wb') as f:
            f.write(data[:len(data) // 3])


@pytest.mark.parametrize('kind,says', [
    ('empty', 'the file is empty'),
    ('random', 'the file is not a checkpoint'),
    ('plain pickle', 'the file is a plain pickle, not a PyTorch checkpoint'),
    ('truncated', 'the file is truncated or corrupt'),
    ('truncated legacy', 'the file is truncated or corrupt'),
])
def test_unloadable_file_says_what_it_is(tmp_path, kind, says):
    """Where the package reads a file (init_cfg, the converters), and
    before a Runner loads ``load_from`` (the checkpoint check)."""
    path = str(tmp_path / 'file.pth')
    _write(path, kind)
    with pytest.raises(InvalidCheckpointError,
                       match=f'Cannot load checkpoint {path}: {says}'):
        load_checkpoint_file(path)
    runner = types.SimpleNamespace(_load_from=path)
    with pytest.raises(InvalidCheckpointError,
                       match=f'Cannot load checkpoint {path}: {says}'):
        CheckpointCheckHook().before_run(runner)


def test_unknown_class_is_named_in_full(tmp_path, unknown_class):
    path = str(tmp_path / 'with_object.pth')
    torch.save({'state_dict': {}, 'trainer': unknown_class()}, path)
    for check in (load_checkpoint_file, lambda path: CheckpointCheckHook(
            ).before_run(types.SimpleNamespace(_load_from=path))):
        with pytest.raises(UnsafeCheckpointError,
                           match='unpickling it needs trainer_lib.'
                           'training_state.TrainingStateSnapshot, which is '
                           'not part'):
            check(path)


# ------------------------------------------------- 5. backbone settings
@pytest.mark.parametrize('name', sorted(BACKBONES))
def test_frozen_stages_out_of_range_raises(name):
    num_stages = build(name).num_stages
    assert num_stages == (3 if name == 'MSFViT' else 4)
    build(name, frozen_stages=num_stages)  # freezing everything is fine
    for bad in (num_stages + 1, 10, -2):
        with pytest.raises(ValueError,
                           match=f'frozen_stages={bad} is out of range; it '
                           f'has {num_stages} stages, so valid values are -1'
                           rf' \(freeze nothing\), 0 \(the stem\) to '
                           f'{num_stages}'):
            build(name, frozen_stages=bad)


def test_init_cfg_without_type_is_pretrained(tmp_path):
    source = build('MSFViT')
    path = str(tmp_path / 'msf.pth')
    torch.save({'state_dict': source.state_dict()}, path)
    model = build('MSFViT', init_cfg=dict(checkpoint=path))
    model.init_weights()
    assert model.load_report is not None and model.load_report.missing == []
    torch.testing.assert_close(model.state_dict(), source.state_dict())


@pytest.mark.slow
def test_every_converter_hint_names_a_command_that_runs():
    """The guard's hint for an official release, rendered for every
    registered backbone: it names the family's converter command where
    the family has one (which then runs, ``--help``), else only
    ``init_cfg``; never a command that does not exist."""
    import subprocess
    import sys

    from tiny_backbones import build_tiny, registered_backbones
    from vitattn_mm.models.checkpoint.guard import official_release_advice
    commands = {}
    for name in registered_backbones():
        backbone = build_tiny(name)
        hint = official_release_advice(backbone, 'backbone', 'release.pth')
        assert "model.backbone.init_cfg=dict(type='Pretrained'" in hint
        command = backbone.converter_command
        if command is None:
            assert 'python ' not in hint, (name, hint)
        else:
            assert f'python {command} release.pth release_vitattn.pth' \
                in hint, (name, hint)
            commands.setdefault(command, name)
    assert set(commands) == {
        f'tools/model_converters/{family}2vitattn.py'
        for family in ('flatten', 'l2vit', 'msf')}
    for command in commands:
        result = subprocess.run([sys.executable, command, '--help'],
                                capture_output=True, text=True)
        assert result.returncode == 0, (command, result.stderr[-2000:])
        assert 'usage' in result.stdout.lower()
