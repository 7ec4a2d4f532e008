"""Every config: project conventions, the model builds and takes the demo
images ``--demo`` feeds it, and (detection and segmentation) its own
training pipeline runs on demo data."""
import copy
import glob
import os.path as osp

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import DATASETS, MODELS, init_default_scope

import vitattn_mm  # noqa: F401
from vitattn_mm.models.layers import LinspaceOnCPU
from vitattn_tools.demo_config import make_demo_config
from vitattn_tools.runtime import task_of

CONFIGS = sorted(
    path for path in glob.glob('configs/**/*.py', recursive=True)
    if '/_base_/' not in path)


def test_configs_found():
    assert len(CONFIGS) > 10


@pytest.fixture(scope='module')
def loaded():
    return {}


def load(path, cache):
    if path not in cache:
        cache[path] = Config.fromfile(path)
    return copy.deepcopy(cache[path])


@pytest.mark.parametrize('path', CONFIGS)
def test_config_conventions_and_build(path, loaded, demo_data):
    cfg = load(path, loaded)
    assert cfg.get('custom_imports') == dict(
        imports=['vitattn_mm'], allow_failed_imports=False), \
        f'{path} must load the plugin with allow_failed_imports=False'
    task_of(cfg)  # default_scope from an inherited stock runtime
    init_default_scope(cfg.default_scope)
    # Shapes only: every config builds in a second on the meta device.
    with torch.device('meta'), LinspaceOnCPU():
        model = MODELS.build(cfg.model)
    assert sum(p.numel() for p in model.parameters()) > 0

    # `--demo`: the demo config's images are large enough for the backbone
    # (e.g. Swin without small-map padding needs 193 pixels).
    demo = make_demo_config(cfg, data_root=demo_data)
    image = DATASETS.build(demo.train_dataloader.dataset)[0]['inputs']
    minimum = getattr(model.backbone, 'min_input_size', 1)
    assert min(image.shape[-2:]) >= minimum, (path, image.shape, minimum)


@pytest.mark.slow
@pytest.mark.parametrize('path', CONFIGS)
def test_demo_image_goes_through_the_model(path, loaded, demo_data):
    """`--demo` for every recipe: an image as the demo config's pipeline
    makes it goes through the model's backbone and neck."""
    cfg = load(path, loaded)
    init_default_scope(cfg.default_scope)
    model = MODELS.build(cfg.model)
    demo = make_demo_config(cfg, data_root=demo_data)
    image = DATASETS.build(demo.train_dataloader.dataset)[0]['inputs']
    with torch.no_grad():
        model.eval().extract_feat(image[None].float())


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


@pytest.mark.slow
@pytest.mark.parametrize('path', CONFIGS)
def test_own_train_pipeline_runs_on_demo_data(path, loaded, demo_data):
    cfg = load(path, loaded)
    task = task_of(cfg)
    if task == 'classification':
        pytest.skip('ImageNet pipelines need its meta files; the recipe '
                    'tests run these configs on the demo set instead')
    if '/demo/' in path:
        pytest.skip('already a demo-data config (run by test_tools)')
    init_default_scope(cfg.default_scope)
    dataset_cfg = cfg.train_dataloader.dataset
    _point_at_demo(dataset_cfg, task, demo_data)
    dataset = DATASETS.build(dataset_cfg)
    sample = dataset[0]
    assert sample['inputs'].dim() == 3
    assert 'data_samples' in sample


def test_importing_the_package_registers_everything_configs_name():
    """What ``custom_imports=['vitattn_mm']`` gives a stock tool, in a fresh
    interpreter: every backbone and task model the configs name."""
    import subprocess
    import sys
    names = sorted({
        Config.fromfile(path).model.get('type', '').split('.')[-1]
        for path in glob.glob('configs/lavit/*.py')
    } | {'LaViT', 'FLattenSwinTransformer', 'L2ViT', 'MSFViT'})
    code = ('import vitattn_mm; from mmengine.registry import MODELS; '
            'import mmdet.registry, mmseg.registry, mmpretrain.registry; '
            f'names = {names!r}; '
            'regs = [mmdet.registry.MODELS, mmseg.registry.MODELS, '
            'mmpretrain.registry.MODELS]; '
            'missing = [n for n in names if not any(r.get(n) for r in regs)]; '
            'print(missing); assert not missing')
    subprocess.run([sys.executable, '-c', code], check=True)
