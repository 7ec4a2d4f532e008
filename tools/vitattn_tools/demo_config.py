"""Turn any detection / segmentation / classification config into a run on
the embedded demo data (``tools/train.py CONFIG --demo``, and the tests).

The model, optimizer, schedulers, ``auto_scale_lr`` and hooks of the recipe
are kept; the data pipelines, dataset, evaluator and class count become the
demo set's (a classifier whose backbone cannot take the 64-pixel demo images
gets them at the recipe's input size), the loop becomes a few iterations,
and pretrained files (not available offline) are not loaded.
"""
import copy
import os.path as osp
from typing import Any, List, Optional

from mmengine.config import Config, ConfigDict
from mmengine.logging import print_log
from mmengine.registry import MODELS, DefaultScope

from .tasks import task_of

#: task -> (demo dataset base config, sub-folder of the demo data root)
DEMO_DATASETS = {
    'detection': ('demo_coco_instance.py', 'coco'),
    'segmentation': ('demo_ade20k.py', 'ade20k'),
    'classification': ('demo_imagenet.py', 'imagenet'),
}


def config_root() -> str:
    """The repository's ``configs/`` folder (development install)."""
    root = osp.join(osp.dirname(osp.dirname(osp.dirname(
        osp.abspath(__file__)))), 'configs')
    if not osp.isdir(root):
        raise FileNotFoundError(
            f'configs/ not found at {root}: install vitattn_mm from its '
            'repository with `pip install -e .`')
    return root


def _max_num_classes(node: Any) -> int:
    if isinstance(node, dict):
        own = node.get('num_classes') if isinstance(
            node.get('num_classes'), int) else 0
        return max([own] + [_max_num_classes(v) for v in node.values()])
    if isinstance(node, (list, tuple)):
        return max([0] + [_max_num_classes(v) for v in node])
    return 0


def _set_num_classes(node: Any, old: int, new: int) -> None:
    """Replace the dataset's class count (not e.g. the RPN's 1)."""
    if isinstance(node, dict):
        if node.get('num_classes') == old:
            node['num_classes'] = new
        for value in node.values():
            _set_num_classes(value, old, new)
    elif isinstance(node, (list, tuple)):
        for value in node:
            _set_num_classes(value, old, new)


def _drop_pretrained(node: Any, path: str = 'model') -> None:
    if isinstance(node, dict):
        init_cfg = node.get('init_cfg')
        if isinstance(init_cfg, dict) and init_cfg.get('type') == 'Pretrained':
            print_log(f'demo: not loading {init_cfg.get("checkpoint")} '
                      f'({path}.init_cfg)', logger='current')
            node['init_cfg'] = None
        if node.get('pretrained'):
            node['pretrained'] = None
        for key, value in node.items():
            _drop_pretrained(value, f'{path}.{key}')
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            _drop_pretrained(value, f'{path}[{i}]')


def _cap_detections(node: Any) -> None:
    """Fewer proposals / detections: demo images hold at most 3 objects, and
    on a CPU the mask head over 100 detections per image dominates."""
    if isinstance(node, dict):
        if isinstance(node.get('max_per_img'), int):
            node['max_per_img'] = 100 if node['max_per_img'] > 100 else min(
                node['max_per_img'], 20)
        if isinstance(node.get('nms_pre'), int):
            node['nms_pre'] = min(node['nms_pre'], 300)
        for value in node.values():
            _cap_detections(value)
    elif isinstance(node, (list, tuple)):
        for value in node:
            _cap_detections(value)


#: Classification pipeline steps -> the key that sets their output size.
_SIZE_KEYS = {'RandomResizedCrop': 'scale', 'ResizeEdge': 'scale',
              'CenterCrop': 'crop_size'}


def _pipeline_size(pipeline: List[dict]) -> Optional[int]:
    """The (square) size a classification pipeline's images end with."""
    size = None
    for step in pipeline:
        value = step.get(_SIZE_KEYS.get(step.get('type')))
        if isinstance(value, int):
            size = value
    return size


def _set_pipeline_size(pipeline: List[dict], size: int) -> None:
    for step in pipeline:
        key = _SIZE_KEYS.get(step.get('type'))
        if key in step:
            step[key] = size


def _min_input_size(cfg: Config) -> int:
    """The smallest image side the config's backbone takes (0 if it does
    not say): read from the backbone built on the meta device."""
    # Here, not at the top: it imports vitattn_mm's models, which the
    # launcher helpers importing this module do not need.
    from .meta import on_meta_device
    with DefaultScope.overwrite_default_scope(cfg.get('default_scope')), \
            on_meta_device():
        backbone = MODELS.build(cfg.model.backbone)
    return getattr(backbone, 'min_input_size', 0)


def _classifier_demo_size(cfg: Config, demo_size: int) -> int:
    """The demo images' size if the backbone takes it, else the recipe's.

    Window attention without padding (Swin's ``pad_small_map=False``)
    needs every stage's map to hold a whole window, e.g. 7x7 windows at
    stride 32 need 193 pixels; the recipe's own input size fits by design.
    """
    minimum = _min_input_size(cfg)
    if demo_size >= minimum:
        return demo_size
    own = _pipeline_size(cfg.test_dataloader.dataset.pipeline) or 224
    if own < minimum:
        raise ValueError(
            f'demo: the backbone needs images of at least {minimum} pixels; '
            f'neither the demo images ({demo_size}) nor the recipe\'s '
            f'({own}) are')
    print_log(f'demo: the backbone needs images of at least {minimum} '
              f'pixels; resizing the {demo_size}x{demo_size} demo images to '
              f'the recipe\'s {own}x{own}.', logger='current')
    return own


def make_demo_config(cfg: Config,
                     data_root: str = 'data/demo',
                     max_iters: int = 2,
                     batch_size: int = 2,
                     val_interval: Optional[int] = None,
                     num_val: Optional[int] = None,
                     keep_pretrained: bool = False) -> Config:
    """A copy of ``cfg`` that trains and evaluates on the demo data.

    Args:
        cfg (Config): Any mmdet / mmseg / mmpretrain config.
        data_root (str): Folder written by
            :func:`vitattn_mm.datasets.generate_demo_data`.
            Default: 'data/demo'.
        max_iters (int): Training iterations. Default: 2.
        batch_size (int): Training batch size. Default: 2.
        val_interval (int, optional): Validate every N iterations.
            Default: ``max_iters`` (once, at the end).
        num_val (int, optional): Evaluate on the first N validation images
            only. Default: None (all).
        keep_pretrained (bool): Keep ``Pretrained`` init configs.
            Default: False.

    Returns:
        Config: The demo config.
    """
    cfg = copy.deepcopy(cfg)
    task = task_of(cfg)
    base_name, sub_dir = DEMO_DATASETS[task]
    demo = Config.fromfile(
        osp.join(config_root(), '_base_', 'datasets', base_name))
    root = osp.join(data_root, sub_dir)
    if task == 'classification':
        demo_size = _pipeline_size(demo.train_pipeline)
        size = _classifier_demo_size(cfg, demo_size)
        if size != demo_size:
            for key in ('train_dataloader', 'val_dataloader',
                        'test_dataloader'):
                _set_pipeline_size(demo[key].dataset.pipeline, size)

    metrics = None
    if task == 'detection' and isinstance(cfg.get('val_evaluator'), dict):
        metrics = cfg.val_evaluator.get('metric')
    for key in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        cfg[key] = copy.deepcopy(demo[key])
        cfg[key].dataset.data_root = root
        if key != 'train_dataloader' and num_val:
            cfg[key].dataset.indices = num_val
    cfg.train_dataloader.batch_size = batch_size
    for key in ('val_evaluator', 'test_evaluator'):
        evaluator = copy.deepcopy(demo[key])
        if task == 'detection':
            evaluator['ann_file'] = osp.join(
                root, 'annotations', 'instances_val.json')
            if metrics:
                evaluator['metric'] = metrics
        cfg[key] = evaluator

    old_classes = _max_num_classes(cfg.model)
    if old_classes > 1:
        _set_num_classes(cfg.model, old_classes, demo.num_classes)
        if isinstance(cfg.get('data_preprocessor'), dict):
            _set_num_classes(cfg.data_preprocessor, old_classes,
                             demo.num_classes)
    if task == 'detection':
        _cap_detections(cfg.model)
    if task == 'segmentation':
        crop = tuple(demo.crop_size)
        for holder in (cfg.model.get('data_preprocessor'),
                       cfg.get('data_preprocessor')):
            if isinstance(holder, dict) and 'size' in holder:
                holder['size'] = crop
        test_cfg = cfg.model.get('test_cfg') or {}
        if test_cfg.get('mode') == 'slide':
            test_cfg['crop_size'] = crop
            test_cfg['stride'] = tuple(c * 2 // 3 for c in crop)
    if not keep_pretrained:
        _drop_pretrained(cfg.model)
        cfg.load_from = None

    val_interval = val_interval or max_iters
    cfg.train_cfg = ConfigDict(
        type='IterBasedTrainLoop', max_iters=max_iters,
        val_interval=val_interval)
    cfg.val_cfg = ConfigDict(type='ValLoop')
    cfg.test_cfg = ConfigDict(type='TestLoop')
    cfg.default_hooks = cfg.get('default_hooks', ConfigDict())
    cfg.default_hooks.logger = ConfigDict(type='LoggerHook', interval=1)
    cfg.default_hooks.checkpoint = ConfigDict(
        type='CheckpointHook', by_epoch=False, interval=val_interval,
        max_keep_ckpts=1)
    cfg.log_processor = ConfigDict(type='LogProcessor', window_size=1,
                                   by_epoch=False)
    # Epoch-based schedulers (mmengine's default) would never step in an
    # iteration loop: keep the iteration-based ones (warm-up, poly).
    schedulers = cfg.get('param_scheduler') or []
    if isinstance(schedulers, dict):
        schedulers = [schedulers]
    cfg.param_scheduler = [
        s for s in schedulers if s.get('by_epoch', True) is False
    ] or None
    cfg.randomness = dict(seed=0)
    return cfg
