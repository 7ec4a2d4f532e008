"""LaViT recipes: every config trains an iteration and runs its test pass on
demo data with the diagonality-preserving loss logged as ``loss_dp``, and a
short detector run lowers its detection loss."""
import glob

import numpy as np
import pytest

CONFIGS = sorted(glob.glob('configs/lavit/*.py'))


def _metric(config):
    name = config.split('/')[-1]
    if name.startswith('retinanet'):
        return 'coco/bbox_mAP'
    if name.startswith(('fpn', 'upernet')):
        return 'mIoU'
    return 'accuracy/top1'


@pytest.mark.slow
@pytest.mark.parametrize('config', CONFIGS)
def test_recipe_trains_and_tests_with_loss_dp(run_recipe, config):
    overrides = {}
    if _metric(config) == 'coco/bbox_mAP':
        # After one iteration every score is near the focal-loss prior
        # (0.01): keep the detections so that COCO evaluation runs.
        overrides['model'] = dict(test_cfg=dict(score_thr=0.))
    runner, losses, metrics = run_recipe(config, **overrides)
    assert 'train/loss_dp' in losses, sorted(losses)
    assert 0 < losses['train/loss_dp'] < 0.1 * 2  # weight 0.1, loss <= 2
    assert _metric(config) in metrics, sorted(metrics)


def _history(runner, key):
    return runner.message_hub.log_scalars[f'train/{key}'].data[0]


@pytest.mark.slow
def test_short_detector_run_lowers_detection_loss(run_recipe):
    """RetinaNet LaViT-T on demo data, the recipe's optimizer without its
    500-iteration warm-up: the detection loss falls while ``loss_dp`` is
    logged beside it."""
    iters = 12
    runner, _, _ = run_recipe(
        'configs/lavit/retinanet_lavit-t_fpn_1x_coco.py',
        max_iters=iters, num_val=1, param_scheduler=[])
    detection = (_history(runner, 'loss_cls') +
                 _history(runner, 'loss_bbox'))
    loss_dp = _history(runner, 'loss_dp')
    assert len(detection) == len(loss_dp) == iters
    assert np.isfinite(loss_dp).all() and (loss_dp > 0).all()
    assert detection[-3:].mean() < 0.9 * detection[:3].mean(), detection
