"""Every config: project conventions, the model builds and takes the demo
images ``--demo`` feeds it, and (detection and segmentation) its own
training pipeline runs on demo data."""
import os.path as osp
from functools import partial

import pytest
import torch
from mmengine.registry import DATASETS, MODELS, init_default_scope

import vitattn_mm  # noqa: F401
from config_cases import ALL_CONFIGS as CONFIGS
from config_cases import (cached_config, check_each, family, fresh_config,
                          one_per_recipe_shape)
from vitattn_tools.demo_config import make_demo_config
from vitattn_tools.meta import on_meta_device
from vitattn_tools.runtime import task_of


def test_configs_found():
    assert len(CONFIGS) > 10


_DEMO_IMAGES = {}


def _demo_image(demo, scope):
    """The first training image of a demo config. Each task's demo pipeline
    ends in a fixed size (a fixed-scale resize of fixed images, a crop to
    ``crop_size``), so configs whose demo dataset is the same get the same
    image: build each distinct dataset once."""
    dataset_cfg = demo.train_dataloader.dataset
    key = (scope, repr(dataset_cfg))
    if key not in _DEMO_IMAGES:
        _DEMO_IMAGES[key] = DATASETS.build(dataset_cfg)[0]['inputs']
    return _DEMO_IMAGES[key]


def _conventions_and_build(path, demo_data):
    cfg = fresh_config(path)
    assert cfg.get('custom_imports') == dict(
        imports=['vitattn_mm'], allow_failed_imports=False), \
        f'{path} must load the plugin with allow_failed_imports=False'
    task_of(cfg)  # default_scope from an inherited stock runtime
    init_default_scope(cfg.default_scope)
    # Shapes only: every config builds in a second on the meta device.
    with on_meta_device():
        model = MODELS.build(cfg.model)
    assert sum(p.numel() for p in model.parameters()) > 0

    # `--demo`: the demo config's images are large enough for the backbone
    # (e.g. Swin without small-map padding needs 193 pixels).
    demo = make_demo_config(cfg, data_root=demo_data)
    image = _demo_image(demo, cfg.default_scope)
    minimum = getattr(model.backbone, 'min_input_size', 1)
    assert min(image.shape[-2:]) >= minimum, (path, image.shape, minimum)


def test_every_config_follows_the_conventions_and_builds(demo_data):
    check_each(CONFIGS, partial(_conventions_and_build, demo_data=demo_data))


def _demo_image_goes_through_the_model(path, demo_data):
    cfg = fresh_config(path)
    init_default_scope(cfg.default_scope)
    model = MODELS.build(cfg.model)
    demo = make_demo_config(cfg, data_root=demo_data)
    image = _demo_image(demo, cfg.default_scope)
    with torch.no_grad():
        model.eval().extract_feat(image[None].float())


@pytest.mark.slow
def test_demo_image_goes_through_every_model(demo_data):
    """`--demo` for every recipe: an image as the demo config's pipeline
    makes it goes through the model's backbone and neck. One config per
    recipe shape: the others differ in sizes only, and the quick tier
    checks for every config that the demo image is large enough."""
    check_each(
        one_per_recipe_shape(CONFIGS),
        partial(_demo_image_goes_through_the_model, demo_data=demo_data))


def _point_at_demo(dataset, task, demo_root):
    while 'dataset' in dataset:  # RepeatDataset, MultiImageMixDataset, ...
        dataset = dataset['dataset']
    if task == 'detection':
        dataset.update(
            data_root=osp.join(demo_root, 'coco'),
            ann_file='annotations/instances_train.json',
            data_prefix=dict(img='train/'),
            metainfo=dict(classes=('circle', 'square', 'triangle')))
    else:
        dataset.update(
            data_root=osp.join(demo_root, 'ade20k'),
            data_prefix=dict(img_path='images/training',
                             seg_map_path='annotations/training'))
    return dataset


def _own_train_pipeline_runs_on_demo_data(path, demo_data):
    cfg = fresh_config(path)
    task = task_of(cfg)
    init_default_scope(cfg.default_scope)
    dataset_cfg = cfg.train_dataloader.dataset
    _point_at_demo(dataset_cfg, task, demo_data)
    dataset = DATASETS.build(dataset_cfg)
    sample = dataset[0]
    assert sample['inputs'].dim() == 3
    assert 'data_samples' in sample


@pytest.mark.slow
def test_own_train_pipelines_run_on_demo_data(demo_data):
    """Every detection and segmentation config's own training pipeline
    (each distinct one once) on demo images. Not classification (ImageNet
    pipelines need its meta files; the recipe tests run those configs on
    the demo set instead) nor the demo configs (already on demo data, run
    by test_tools)."""
    configs = [
        path for path in CONFIGS if '/demo/' not in path
        and task_of(cached_config(path)) != 'classification'
    ]
    # One config per distinct dataset and pipeline.
    pipelines = {}
    for path in configs:
        dataset = cached_config(path).train_dataloader.dataset
        pipelines.setdefault(repr(dataset.to_dict()), path)
    check_each(
        sorted(pipelines.values()),
        partial(_own_train_pipeline_runs_on_demo_data, demo_data=demo_data))


@pytest.mark.slow
def test_importing_the_package_registers_everything_configs_name():
    """What ``custom_imports=['vitattn_mm']`` gives a stock tool, in a fresh
    interpreter: every backbone and task model the configs name."""
    import subprocess
    import sys
    names = sorted({
        cached_config(path).model.get('type', '').split('.')[-1]
        for path in family('lavit')
    } | {'LaViT', 'FLattenSwinTransformer', 'L2ViT', 'MSFViT'})
    code = ('import vitattn_mm; from mmengine.registry import MODELS; '
            'import mmdet.registry, mmseg.registry, mmpretrain.registry; '
            f'names = {names!r}; '
            'regs = [mmdet.registry.MODELS, mmseg.registry.MODELS, '
            'mmpretrain.registry.MODELS]; '
            'missing = [n for n in names if not any(r.get(n) for r in regs)]; '
            'print(missing); assert not missing')
    subprocess.run([sys.executable, '-c', code], check=True)
