"""L2ViT recipes: every config trains an iteration and runs its test pass on
the demo data with the recipe's optimizer settings; a short RetinaNet run
lowers its loss; weight decay falls where the official code puts it; every
downstream config names the official release file, which loads from its URL
as it is."""
import functools
import glob
import http.server
import os.path as osp
import threading

import numpy as np
import pytest
import torch

from config_cases import (cached_config, check_each, fresh_config,
                          one_per_recipe_shape)
from vitattn_tools.meta import on_meta_device

CONFIGS = sorted(glob.glob('configs/l2vit/*.py'))
DOWNSTREAM = [c for c in CONFIGS if not c.endswith('_in1k.py')]
#: The configs the slow tier trains: one per recipe shape (model, heads,
#: attention settings, dataset, optimizer), the smallest; the others differ
#: only in sizes, which the quick tier builds for every config.
RECIPE_RUNS = [
    'configs/l2vit/l2vit-t_32xb128_in1k.py',
    'configs/l2vit/mask-rcnn_l2vit-t_fpn_ms-crop-1x_coco.py',
    'configs/l2vit/retinanet_l2vit-t_fpn_ms-crop-1x_coco.py',
    'configs/l2vit/upernet_l2vit-t_8xb2-160k_ade20k-512x512.py',
]
RELEASE = 'https://github.com/ChuanyangZheng/L2ViT/releases/download/v1.0/'
#: The official ImageNet-1k files (readme.md, "ImageNet-1K trained models").
RELEASE_FILES = dict(t='L2ViT-Tiny-checkpoint-best-ema.pth',
                     s='L2ViT-Small-checkpoint-best-ema.pth',
                     b='L2ViT-Base-checkpoint-best-ema.pth')


def _metric(config):
    name = config.split('/')[-1]
    if name.startswith('retinanet'):
        return 'coco/bbox_mAP'
    if name.startswith('mask-rcnn'):
        return 'coco/segm_mAP'
    if name.startswith('upernet'):
        return 'mIoU'
    return 'accuracy/top1'


def test_every_recipe_is_listed():
    # RetinaNet 1x, Mask R-CNN 1x and 3x, UperNet 160k, ImageNet: T/S/B each.
    assert len(CONFIGS) == 15


def _demo_overrides(config):
    """Settings that only make the demo run cheap or meaningful."""
    name = config.split('/')[-1]
    overrides = dict(
        # No checkpoint (up to 1.3 GB with the AdamW state) and no
        # validation before the test pass.
        default_hooks=dict(checkpoint=dict(interval=-1, save_last=False)),
        train_cfg=dict(val_interval=10**6))
    # UperNet's pyramid pooling has BatchNorm on 1x1 maps: two images.
    overrides['batch_size'] = 2 if name.startswith('upernet') else 1
    if name.startswith('retinanet'):
        # An untrained RetinaNet scores every anchor at its 0.01 prior,
        # under the 0.05 threshold: keep them so COCO evaluation runs.
        overrides['model'] = dict(test_cfg=dict(score_thr=0.))
    return overrides


@pytest.mark.slow
@pytest.mark.parametrize('config', RECIPE_RUNS)
def test_recipe_trains_and_tests_on_demo_data(run_recipe, config):
    runner, losses, metrics = run_recipe(fresh_config(config), num_val=1,
                                         **_demo_overrides(config))
    assert _metric(config) in metrics, sorted(metrics)

    model = runner.model
    arch = config.split('l2vit-')[1][0]
    assert type(model.backbone).__name__ == 'L2ViT'
    assert model.backbone.embed_dims[0] == (128 if arch == 'b' else 96)
    _check_weight_decay(config, runner.optim_wrapper.optimizer,
                        model.backbone)


def _check_weight_decay(config, optimizer, backbone):
    """Weight decay where the official code puts it.

    ImageNet (classification/optim_factory.py): none on 1-d tensors (norms)
    and biases, the base rate on everything else, the linear attention's
    (heads, 1, 1) temperatures included. Detection and segmentation (no
    paramwise_cfg in the official mmdet / mmseg configs): the base rate on
    every parameter, norms and temperatures included.
    """
    decay = {id(p): group['weight_decay']
             for group in optimizer.param_groups for p in group['params']}
    base_decay = optimizer.defaults['weight_decay']
    assert base_decay > 0
    imagenet = config.endswith('_in1k.py')
    checked = set()
    for name, param in backbone.named_parameters():
        if imagenet and (param.ndim == 1 or name.endswith('.bias')):
            assert decay[id(param)] == 0, name
        else:
            assert decay[id(param)] == base_decay, name
        if name.endswith(('temperature', 'norm1.weight', 'attn.qkv.weight')):
            checked.add(name.rsplit('.', 1)[-1] if 'temperature' in name
                        else name.split('.')[-2] + '.weight')
    # The rule reached the parameters it is about.
    assert {'temperature', 'norm1.weight', 'qkv.weight'} <= checked, checked


def _weight_decay_follows_official_code(config):
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import DefaultScope, init_default_scope

    import vitattn_mm  # noqa: F401
    cfg = fresh_config(config)
    init_default_scope(cfg.default_scope)
    from mmengine.registry import MODELS
    cfg.model.backbone.init_cfg = None
    # Which group each parameter falls in needs no weights: shapes only.
    with DefaultScope.overwrite_default_scope(cfg.default_scope), \
            on_meta_device():
        model = MODELS.build(cfg.model)
        wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    _check_weight_decay(config, wrapper.optimizer, model.backbone)


def test_weight_decay_follows_official_code():
    check_each([
        'configs/l2vit/l2vit-t_32xb128_in1k.py',
        'configs/l2vit/mask-rcnn_l2vit-t_fpn_ms-crop-1x_coco.py',
        'configs/l2vit/retinanet_l2vit-t_fpn_ms-crop-1x_coco.py',
        'configs/l2vit/upernet_l2vit-t_8xb2-160k_ade20k-512x512.py',
    ], _weight_decay_follows_official_code)


def test_downstream_configs_name_the_official_release_file():
    check_each(DOWNSTREAM, _names_the_official_release_file)


def _names_the_official_release_file(config):
    cfg = cached_config(config)
    arch = config.split('l2vit-')[1][0]
    init_cfg = cfg.model.backbone.init_cfg
    assert init_cfg.type == 'Pretrained'
    assert init_cfg.checkpoint == RELEASE + RELEASE_FILES[arch]
    # The raw weights, as the official mmcv_custom load_checkpoint takes
    # them ('state_dict', else 'model').
    assert init_cfg.get('state_dict_key') in (None, 'model')
    assert 'CheckpointCheckHook' in [h['type'] for h in cfg.custom_hooks]


def test_official_release_file_loads_from_its_url(tmp_path, monkeypatch):
    """The downstream init_cfg, unchanged but for the host: an official
    layout file ({'model', 'model_ema', 'optimizer', 'args'}) served over
    HTTP is downloaded by mmengine and fills the backbone without a
    conversion step."""
    import argparse

    from vitattn_mm.models.backbones.l2vit import L2ViT
    from test_l2vit import official_state_dict
    served = tmp_path / 'served'
    served.mkdir()
    name = RELEASE_FILES['t']
    state = official_state_dict('tiny')
    torch.save({'model': state, 'model_ema': state, 'epoch': 'best-ema',
                'optimizer': {'state': {}, 'param_groups': []},
                'args': argparse.Namespace(model='L2ViT_Tiny')},
               served / name)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler,
                                directory=str(served))
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch_home'))
    try:
        cfg = cached_config(
            'configs/l2vit/mask-rcnn_l2vit-t_fpn_ms-crop-1x_coco.py')
        init_cfg = dict(cfg.model.backbone.init_cfg)
        init_cfg['checkpoint'] = init_cfg['checkpoint'].replace(
            RELEASE, f'http://127.0.0.1:{server.server_port}/')
        model = L2ViT('tiny', out_indices=(0, 1, 2, 3), init_cfg=init_cfg)
        model.init_weights()
    finally:
        server.shutdown()
    report = model.load_report
    assert report.mismatched == [] and report.loaded_ratio > 0.99
    # Only the detection layout's extra output norms are not in the file.
    assert sorted(report.missing) == [
        f'norm{i}.{p}' for i in range(3) for p in ('bias', 'weight')]
    assert osp.exists(tmp_path / 'torch_home' / 'hub' / 'checkpoints' / name)
    torch.testing.assert_close(
        model.stages[2].blocks[5].attn.temperature,
        state['stages.2.5.attn.temperature'])


@pytest.mark.slow
def test_short_run_lowers_retinanet_loss(run_recipe):
    """RetinaNet with a narrow L2ViT from scratch, the recipe's AdamW
    without its 500-iteration warm-up: the loss of the last iterations is
    below that of the first ones."""
    iters = 20
    runner, _, _ = run_recipe(
        fresh_config('configs/l2vit/retinanet_l2vit-t_fpn_ms-crop-1x_coco.py'),
        max_iters=iters,
        batch_size=2,
        num_val=1,
        model=dict(
            backbone=dict(
                arch=dict(
                    _delete_=True,
                    embed_dims=[32, 64, 128, 256],
                    depths=[2, 2, 2, 2],
                    num_heads=[1, 2, 4, 8])),
            neck=dict(in_channels=[64, 128, 256])),
        param_scheduler=[],
        default_hooks=dict(checkpoint=dict(interval=-1, save_last=False)),
        train_cfg=dict(val_interval=10**6))
    history = runner.message_hub.get_scalar('train/loss').data[0]
    assert len(history) == iters
    assert np.mean(history[-5:]) < 0.8 * np.mean(history[:5]), history


def test_recipe_runs_cover_every_recipe_shape():
    assert one_per_recipe_shape(CONFIGS) == RECIPE_RUNS
