"""LaViT recipes: every config trains an iteration and runs its test pass on
demo data with the diagonality-preserving loss logged as ``loss_dp``, and a
short detector run lowers its detection loss; the ImageNet configs train
with the recipes behind the paper's numbers (DeiT's for DeiT/ViT+LA and
LaViT, Swin's for Swin+LA), and the paper-literal config is lavit-t with
only the DP loss changed."""
import glob

import numpy as np
import pytest

from config_cases import cached_config, check_each, one_per_recipe_shape

CONFIGS = sorted(glob.glob('configs/lavit/*.py'))
LITERAL = 'configs/lavit/lavit-t_paper-literal_4xb256_in1k.py'
#: The configs the slow tier trains: one per recipe shape (model, heads,
#: attention settings, dataset, optimizer), the smallest; the others differ
#: only in sizes, which the quick tier builds for every config.
RECIPE_RUNS = [
    'configs/lavit/deit-t-la_4xb256_in1k.py',
    'configs/lavit/fpn_lavit-s_4xb4-80k_ade20k-512x512.py',
    'configs/lavit/lavit-t_4xb256_in1k.py',
    'configs/lavit/lavit-t_paper-literal_4xb256_in1k.py',
    'configs/lavit/retinanet_lavit-t_fpn_1x_coco.py',
    'configs/lavit/retinanet_swin-t-la_fpn_1x_coco.py',
    'configs/lavit/swin-t-la_16xb64_in1k.py',
    'configs/lavit/upernet_lavit-s_8xb2-160k_ade20k-512x512.py',
    'configs/lavit/upernet_swin-t-la_8xb2-160k_ade20k-512x512.py',
    'configs/lavit/vit-t-la_4xb256_in1k.py',
]
DEIT_LA = ['configs/lavit/{}-{}-la_4xb256_in1k.py'.format(m, s)
           for m in ('deit', 'vit') for s in ('t', 's')]
LAVIT = ['configs/lavit/lavit-{}_4xb256_in1k.py'.format(s) for s in 'tsb']
SWIN_LA = ['configs/lavit/swin-{}-la_16xb64_in1k.py'.format(s) for s in 'ts']


def _schedule(cfg):
    warmup, cosine = cfg.param_scheduler
    assert warmup['type'] == 'LinearLR' and cosine['type'] == \
        'CosineAnnealingLR'
    assert warmup['end'] == cosine['begin']
    return warmup['end'], warmup['start_factor'], cosine['eta_min']


def test_deit_recipe():
    """facebookresearch/deit main.py defaults (LaViT Sec. 4.3 follows DeiT):
    5 warm-up epochs from 1e-6, cosine to 1e-5, drop path 0.1 (LaViT-B
    0.3), no clipping, AdamW wd 0.05, batch 4 x 256, repeated augmentation,
    Mixup 0.8 / CutMix 1.0, label smoothing 0.1, no EMA; lr 5e-4 * 1024 /
    512 for DeiT/ViT+LA, the paper's 0.005 for LaViT."""
    check_each(DEIT_LA + LAVIT, _deit_recipe)


def _deit_recipe(config):
    cfg = cached_config(config)
    lr = cfg.optim_wrapper.optimizer.lr
    assert lr == (0.005 if config in LAVIT else 1e-3)
    assert cfg.optim_wrapper.optimizer.type == 'AdamW'
    assert cfg.optim_wrapper.optimizer.weight_decay == 0.05
    assert cfg.optim_wrapper.get('clip_grad') is None
    assert _schedule(cfg) == (5, 1e-3, 1e-5)
    assert cfg.train_cfg.max_epochs == 300
    assert cfg.train_dataloader.batch_size == 256
    assert cfg.train_dataloader.sampler.type == 'RepeatAugSampler'
    assert cfg.model.backbone.drop_path_rate == (
        0.3 if 'lavit-b' in config else 0.1)
    assert cfg.model.train_cfg.augments == [
        dict(type='Mixup', alpha=0.8), dict(type='CutMix', alpha=1.0)]
    assert cfg.model.head.loss.label_smooth_val == 0.1
    assert not any(h['type'] == 'EMAHook' for h in cfg.custom_hooks)
    assert cfg.auto_scale_lr.base_batch_size == 1024


def test_swin_recipe():
    """Swin's own ImageNet recipe (Table 5's Swin rows): 20 warm-up
    epochs, clipping 5, drop path 0.2 / 0.3, lr 1e-3."""
    check_each(SWIN_LA, _swin_recipe)


def _swin_recipe(config):
    cfg = cached_config(config)
    assert cfg.optim_wrapper.optimizer.lr == 1e-3
    assert cfg.optim_wrapper.clip_grad == dict(max_norm=5.0)
    assert _schedule(cfg) == (20, 1e-3, 1e-5)
    assert cfg.model.backbone.drop_path_rate == (
        0.2 if 'swin-t' in config else 0.3)


def _checkpoint_check_and_recipe_sources(config):
    cfg = cached_config(config)
    assert any(h['type'] == 'CheckpointCheckHook' for h in cfg.custom_hooks)
    kinds = ('paper:', 'official:', 'openmmlab:', 'ours:')
    assert cfg.recipe_sources and all(
        isinstance(v, str) and v.startswith(kinds)
        for v in cfg.recipe_sources.values()), cfg.recipe_sources


def test_checkpoint_check_and_recipe_sources():
    check_each(CONFIGS, _checkpoint_check_and_recipe_sources)


def test_paper_literal_is_lavit_t_with_the_papers_dp_loss():
    """Same network, data and recipe as lavit-t (at the paper's lr 0.005);
    only the DP loss (Eq. 9-10 as printed, weight 1) differs."""
    default, literal = cached_config(LAVIT[0]), cached_config(LITERAL)
    assert literal.optim_wrapper.optimizer.lr == 0.005
    assert literal.model.backbone.dp_loss_weight == 1.0
    assert literal.model.backbone.dp_loss_form == 'paper'
    backbone = dict(literal.model.backbone)
    del backbone['dp_loss_weight'], backbone['dp_loss_form']
    reference = dict(default.model.backbone)
    del reference['dp_loss_weight']
    assert backbone == reference
    for key in ('optim_wrapper', 'param_scheduler', 'train_dataloader',
                'train_cfg', 'auto_scale_lr'):
        assert literal[key] == default[key], key


def _metric(config):
    name = config.split('/')[-1]
    if name.startswith('retinanet'):
        return 'coco/bbox_mAP'
    if name.startswith(('fpn', 'upernet')):
        return 'mIoU'
    return 'accuracy/top1'


@pytest.mark.slow
@pytest.mark.parametrize('config', RECIPE_RUNS)
def test_recipe_trains_and_tests_with_loss_dp(run_recipe, config):
    overrides = {}
    if _metric(config) == 'coco/bbox_mAP':
        # After one iteration every score is near the focal-loss prior
        # (0.01): keep the detections so that COCO evaluation runs.
        overrides['model'] = dict(test_cfg=dict(score_thr=0.))
    runner, losses, metrics = run_recipe(config, **overrides)
    assert 'train/loss_dp' in losses, sorted(losses)
    if config == LITERAL:  # Eq. 9 as printed: unbounded, any sign
        assert losses['train/loss_dp'] != 0
    else:
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
        max_iters=iters, batch_size=2, num_val=1, param_scheduler=[])
    detection = (_history(runner, 'loss_cls') +
                 _history(runner, 'loss_bbox'))
    loss_dp = _history(runner, 'loss_dp')
    assert len(detection) == len(loss_dp) == iters
    assert np.isfinite(loss_dp).all() and (loss_dp > 0).all()
    assert detection[-3:].mean() < 0.9 * detection[:3].mean(), detection


def test_recipe_runs_cover_every_recipe_shape():
    assert one_per_recipe_shape(CONFIGS) == RECIPE_RUNS
