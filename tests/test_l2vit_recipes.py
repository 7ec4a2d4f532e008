"""L2ViT recipes: every config trains an iteration and runs its test pass on
the demo data with the recipe's optimizer settings; a short RetinaNet run
lowers its loss."""
import glob

import numpy as np
import pytest
from mmengine.config import Config

CONFIGS = sorted(glob.glob('configs/l2vit/*.py'))


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


def _load(config):
    # The Runner prints and dumps the config five times; formatting it with
    # yapf each time would cost more CPU than the training iteration.
    return Config.fromfile(config, format_python_code=False)


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
@pytest.mark.parametrize('config', CONFIGS)
def test_recipe_trains_and_tests_on_demo_data(run_recipe, config):
    runner, losses, metrics = run_recipe(_load(config), num_val=1,
                                         **_demo_overrides(config))
    assert _metric(config) in metrics, sorted(metrics)

    model = runner.model
    arch = config.split('l2vit-')[1][0]
    assert type(model.backbone).__name__ == 'L2ViT'
    assert model.backbone.embed_dims[0] == (128 if arch == 'b' else 96)
    # No weight decay on norms (LayerNorm and BatchNorm) or temperatures;
    # weight decay on the projections.
    decay = {id(p): group['weight_decay']
             for group in runner.optim_wrapper.optimizer.param_groups
             for p in group['params']}
    base_decay = runner.optim_wrapper.optimizer.defaults['weight_decay']
    for name, param in model.backbone.named_parameters():
        if 'norm' in name or 'temperature' in name:
            assert decay[id(param)] == 0, name
        elif name.endswith('attn.qkv.weight'):
            assert decay[id(param)] == base_decay > 0, name


@pytest.mark.slow
def test_short_run_lowers_retinanet_loss(run_recipe):
    """RetinaNet with a narrow L2ViT from scratch, the recipe's AdamW
    without its 500-iteration warm-up: the loss of the last iterations is
    below that of the first ones."""
    iters = 20
    runner, _, _ = run_recipe(
        _load('configs/l2vit/retinanet_l2vit-t_fpn_ms-crop-1x_coco.py'),
        max_iters=iters,
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
