"""MSF recipes: the values each config trains with (the official ImageNet
recipe with its gradient clipping, the Swin release's multi-scale 1x for
Mask R-CNN; the checkpoint check and the recipe sources of every config
are tests/test_recipes.py's); every downstream config and every
classification recipe trains an iteration and runs a test pass on the demo
data (the other variants of a classification recipe build and take a
training step); the multi-scale crop pipeline runs on demo images; a short
run lowers an MSF segmentor's loss."""
import glob
import os.path as osp

import numpy as np
import pytest
import torch
from mmengine.config import Config

from config_cases import (cached_config, check_each, fresh_config,
                          one_per_recipe_shape)

DOWNSTREAM = sorted(
    glob.glob('configs/msf/upernet_*.py') +
    glob.glob('configs/msf/mask-rcnn_*.py') +
    glob.glob('configs/msf/setr_*.py'))
# The two classification recipes (Simple ViT, Swin). Their other configs
# change only the backbone's arch / groups / mean_shift and the head width.
CLS_RECIPES = [
    'configs/msf/msf-vit-s_4xb256-300e_in1k.py',
    'configs/msf/msf-swin-t_4xb256-300e_in1k.py'
]
CLS_SIZES = sorted(
    set(glob.glob('configs/msf/*_in1k.py')) - set(CLS_RECIPES))
#: The configs the slow tier trains: one per recipe shape (model, heads,
#: attention settings, dataset, optimizer), the smallest; the others differ
#: only in sizes, which the quick tier builds for every config.
RECIPE_RUNS = [
    'configs/msf/mask-rcnn_msf-swin-t_fpn_1x_coco.py',
    'configs/msf/mask-rcnn_swin-t-softmax_fpn_1x_coco.py',
    'configs/msf/msf-swin-t_4xb256-300e_in1k.py',
    'configs/msf/msf-vit-s_4xb256-300e_in1k.py',
    'configs/msf/setr_msf-vit-s-g2_mla_8xb2-160k_ade20k-512x512.py',
    'configs/msf/setr_msf-vit-s_mla_8xb2-160k_ade20k-512x512.py',
    'configs/msf/setr_vit-s-softmax_mla_8xb2-160k_ade20k-512x512.py',
    'configs/msf/upernet_msf-swin-t-g2_8xb2-160k_ade20k-512x512.py',
    'configs/msf/upernet_msf-swin-t_8xb2-160k_ade20k-512x512.py',
    'configs/msf/upernet_swin-t-softmax_8xb2-160k_ade20k-512x512.py',
]
#: The classification variants the slow tier trains a step of, likewise.
CLS_VARIANT_RUNS = [
    'configs/msf/msf-swin-s_4xb256-300e_in1k.py',
    'configs/msf/msf-swin-t-g2_4xb256-300e_in1k.py',
    'configs/msf/msf-vit-ti-g2_4xb256-300e_in1k.py',
    'configs/msf/msf-vit-ti_4xb256-300e_in1k.py',
    'configs/msf/swin-t-softmax_4xb256-300e_in1k.py',
    'configs/msf/vit-ti-softmax_4xb256-300e_in1k.py',
]

# Model, optimizer and schedule are the recipe's; the demo run skips the
# checkpoint file (up to 1 GB with AdamW state) and the end-of-training
# validation (the test pass evaluates the same images).
LEAN = dict(
    num_val=1,
    default_hooks=dict(checkpoint=None),
    val_cfg=None,
    val_dataloader=None,
    val_evaluator=None)


def test_every_config_is_covered_and_in_the_metafile():
    from vitattn_tools.model_zoo import load_metafiles
    assert len(DOWNSTREAM) == 11
    assert len(CLS_RECIPES) + len(CLS_SIZES) == 18
    assert set(CLS_RECIPES) <= set(glob.glob('configs/msf/*_in1k.py'))
    entries = load_metafiles(['configs/msf/metafile.yml'])
    assert sorted(e.config for e in entries) == sorted(
        glob.glob('configs/msf/*.py'))
    for entry in entries:
        assert entry.collection == ('MSF baselines' if 'softmax' in
                                    entry.config else 'MSF')
        # The paper gives params / FLOPs for its ImageNet rows only.
        assert (entry.paper_params is not None) == ('in1k' in entry.config)


CLS_ALL = sorted(glob.glob('configs/msf/*_in1k.py'))


def test_imagenet_recipes_are_the_official_one():
    """tk1980/MSFtransformer train.py defaults + README command: AdamW 1e-3,
    wd 0.05 on every parameter, grad norm clipped at 1, fp16, batch 4 x 256,
    10 warm-up epochs from 0.033x, cosine; Simple ViT without drop path,
    Swin with its own (0.2 / 0.3)."""
    check_each(CLS_ALL, _imagenet_recipe_is_the_official_one)


def _imagenet_recipe_is_the_official_one(config):
    cfg = cached_config(config)
    optim = cfg.optim_wrapper
    assert optim.type == 'AmpOptimWrapper'
    assert optim.clip_grad == dict(max_norm=1.0)
    assert dict(optim.optimizer) == dict(
        type='AdamW', lr=1e-3, weight_decay=0.05)
    assert 'paramwise_cfg' not in optim  # the official run decays all
    assert cfg.train_dataloader.batch_size == 256
    assert cfg.auto_scale_lr.base_batch_size == 1024
    warmup, cosine = cfg.param_scheduler
    assert (warmup.start_factor, warmup.end) == (0.033, 10)
    assert cosine.type == 'CosineAnnealingLR' and cosine.begin == 10
    assert cfg.train_cfg.max_epochs == 300
    assert cfg.train_dataloader.sampler.num_repeats == 3
    assert [a.alpha for a in cfg.model.train_cfg.augments] == [0.2, 0.2]
    expected = {'swin-t': 0.2, 'swin-s': 0.3}.get(
        config.split('/')[-1].replace('msf-', '')[:6], 0.)
    assert cfg.model.backbone.drop_path_rate == expected
    assert cfg.recipe_sources.clip_grad.startswith(
        'official: MSFtransformer/train.py')


def test_mask_rcnn_is_the_swin_release_multiscale_1x():
    """Swin-Transformer-Object-Detection's mask_rcnn_swin_tiny ... mstrain_
    480-800_adamw_1x: mmdet's ms-crop pipeline on a 12-epoch schedule."""
    check_each(sorted(glob.glob('configs/msf/mask-rcnn_*.py')),
               _is_the_swin_release_multiscale_1x)


def _is_the_swin_release_multiscale_1x(config):
    cfg = cached_config(config)
    import mmdet
    stock = cached_config(osp.join(
        osp.dirname(mmdet.__file__), '.mim', 'configs', 'swin',
        'mask-rcnn_swin-t-p4-w7_fpn_ms-crop-3x_coco.py'))
    assert cfg.train_dataloader.dataset.pipeline == \
        stock.train_dataloader.dataset.pipeline
    choice = cfg.train_dataloader.dataset.pipeline[3]
    assert choice.type == 'RandomChoice'
    shorts = [s[0] for s in choice.transforms[0][0].scales]
    assert (min(shorts), max(shorts), len(shorts)) == (480, 800, 11)
    assert choice.transforms[1][1].type == 'RandomCrop'
    assert cfg.train_cfg.max_epochs == 12
    warmup, step = cfg.param_scheduler
    assert (warmup.end, step.milestones) == (500, [8, 11])
    assert cfg.model.backbone.drop_path_rate == 0.1
    assert cfg.optim_wrapper.type == 'AmpOptimWrapper'
    assert cfg.optim_wrapper.optimizer.lr == 1e-4
    assert cfg.optim_wrapper.optimizer.weight_decay == 0.05
    assert cfg.train_dataloader.batch_size == 2  # x 8 GPUs


def test_mask_rcnn_multiscale_crop_pipeline_runs(demo_data):
    """The demo run swaps the pipeline for the demo set's: run the recipe's
    own train pipeline (its two random branches) on the demo COCO images."""
    import random

    from mmdet.registry import DATASETS
    from mmdet.utils import register_all_modules
    register_all_modules()
    cfg = fresh_config('configs/msf/mask-rcnn_msf-swin-t_fpn_1x_coco.py')
    demo = Config.fromfile('configs/_base_/datasets/demo_coco_instance.py')
    dataset_cfg = demo.train_dataloader.dataset
    dataset_cfg.update(data_root=f'{demo_data}/coco',
                       pipeline=cfg.train_dataloader.dataset.pipeline)
    dataset = DATASETS.build(dataset_cfg)
    random.seed(0)
    np.random.seed(0)
    sides = set()
    for i in range(12):
        sample = dataset[i % len(dataset)]
        h, w = sample['inputs'].shape[-2:]
        sides.add(min(h, w))
        assert 480 <= min(h, w) <= 800 or max(h, w) == 1333
    assert len(sides) > 1  # multi-scale


@pytest.mark.slow
@pytest.mark.parametrize('config', RECIPE_RUNS)
def test_recipe_trains_and_tests_on_demo_data(run_recipe, config):
    # make_demo_config gives the Swin classifier (7x7 windows, no small-map
    # padding) 224-pixel images itself. fp16 recipes (AmpOptimWrapper) run
    # as tools/train.py runs them (run_recipe): bf16 autocast without CUDA.
    runner, losses, metrics = run_recipe(config, **LEAN)
    if 'coco' in config:
        assert 'coco/bbox_mAP' in metrics and 'coco/segm_mAP' in metrics
    elif 'ade20k' in config:
        assert 'mIoU' in metrics
    else:
        assert 'accuracy/top1' in metrics
    model = runner.model
    backbone = model.backbone
    assert type(backbone).__name__ in ('MSFSwinTransformer', 'MSFViT')
    attn = next(m for n, m in backbone.named_modules()
                if type(m).__name__ == 'MeanShiftAttention')
    assert attn.mean_shift == ('softmax' not in config)
    assert attn.qkv.groups == (2 if '-g2' in config else 1)


@pytest.mark.slow  # full-size classifiers, each a training step
def test_classification_variants_build_and_train():
    check_each(CLS_VARIANT_RUNS, _classification_variant_builds_and_trains)


def _classification_variant_builds_and_trains(config):
    from mmpretrain.registry import MODELS
    from mmpretrain.structures import DataSample
    torch.manual_seed(0)
    cfg = fresh_config(config)
    model = MODELS.build(cfg.model)
    size = 224 if 'swin' in config else 64
    images = torch.randn(2, 3, size, size)
    samples = [DataSample().set_gt_label(i) for i in (3, 7)]
    losses = model(images, samples, mode='loss')
    sum(losses.values()).backward()
    assert all(torch.isfinite(v) for v in losses.values())
    assert model.backbone.patch_embed.projection.weight.grad is not None
    with torch.no_grad():
        scores = model(images, mode='tensor')
    assert scores.shape == (2, 1000)


@pytest.mark.slow
def test_short_run_lowers_msf_segmentor_loss(run_recipe):
    """SETR-MLA (the paper's downstream setting) with a small MSF-ViT from
    scratch: the loss of the last iterations is below that of the first."""
    iters = 12
    runner, _, _ = run_recipe(
        'configs/msf/setr_msf-vit-s_mla_8xb2-160k_ade20k-512x512.py',
        max_iters=iters,
        batch_size=2,
        model=dict(
            backbone=dict(
                arch=dict(
                    _delete_=True, embed_dims=64, depth=4, num_heads=2),
                out_indices=(0, 1, 2, 3)),
            neck=dict(in_channels=[64, 64, 64, 64])),
        param_scheduler=[],
        **LEAN)
    history = runner.message_hub.get_scalar('train/loss').data[0]
    assert len(history) == iters
    assert np.mean(history[-4:]) < 0.8 * np.mean(history[:4])


def test_recipe_runs_cover_every_recipe_shape():
    assert one_per_recipe_shape(DOWNSTREAM + CLS_RECIPES) == RECIPE_RUNS
    assert one_per_recipe_shape(CLS_SIZES) == CLS_VARIANT_RUNS
