"""MSF recipes: every downstream config and every classification recipe
trains an iteration and runs a test pass on the demo data (the other
variants of a classification recipe build and take a training step); a
short run lowers an MSF segmentor's loss."""
import glob

import numpy as np
import pytest
import torch
from mmengine.config import Config

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
    from vitattn_mm.utils.model_zoo import load_metafiles
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


@pytest.mark.slow
@pytest.mark.parametrize('config', DOWNSTREAM + CLS_RECIPES)
def test_recipe_trains_and_tests_on_demo_data(run_recipe, config):
    # make_demo_config gives the Swin classifier (7x7 windows, no small-map
    # padding) 224-pixel images itself.
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


@pytest.mark.parametrize('config', CLS_SIZES)
def test_classification_variants_build_and_train(config):
    from mmpretrain.registry import MODELS
    from mmpretrain.structures import DataSample
    torch.manual_seed(0)
    cfg = Config.fromfile(config)
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
