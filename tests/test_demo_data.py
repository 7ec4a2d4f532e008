"""The embedded demo data: deterministic, valid, readable by the real
dataset classes and evaluators."""
import filecmp
import os.path as osp

import numpy as np
from mmengine.registry import init_default_scope
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO

from vitattn_mm.datasets import SHAPE_CLASSES, generate_demo_data


def test_generation_is_deterministic(tmp_path):
    a = generate_demo_data(str(tmp_path / 'a'), num_train=4, num_val=2)
    b = generate_demo_data(str(tmp_path / 'b'), num_train=4, num_val=2)
    for rel in ('coco/annotations/instances_train.json', 'coco/val/000001.jpg',
                'ade20k/annotations/training/ADE_demo_training_000003.png'):
        assert filecmp.cmp(osp.join(tmp_path, 'a', rel),
                           osp.join(tmp_path, 'b', rel), shallow=False)
    assert a['coco'].endswith('coco') and b['imagenet'].endswith('imagenet')


def test_coco_annotations_are_consistent(demo_data):
    coco = COCO(osp.join(demo_data, 'coco/annotations/instances_val.json'))
    assert [c['name'] for c in coco.loadCats(coco.getCatIds())] == list(
        SHAPE_CLASSES)
    assert len(coco.getImgIds()) == 50 and len(coco.getAnnIds()) >= 50
    for ann in coco.loadAnns(coco.getAnnIds()[:20]):
        image = coco.loadImgs(ann['image_id'])[0]
        rle = mask_utils.frPyObjects(ann['segmentation'], image['height'],
                                     image['width'])
        mask = mask_utils.decode(mask_utils.merge(rle))
        ys, xs = np.nonzero(mask)
        x, y, w, h = ann['bbox']
        # The polygon mask and the box describe the same object.
        assert abs(xs.min() - x) <= 1 and abs(ys.min() - y) <= 1
        assert abs(xs.max() + 1 - (x + w)) <= 1
        assert abs(ys.max() + 1 - (y + h)) <= 1
        assert mask.sum() == ann['area']


def test_real_dataset_classes_read_it(demo_data):
    from mmdet.registry import DATASETS as DET_DATASETS
    from mmseg.registry import DATASETS as SEG_DATASETS
    from mmengine.config import Config

    from vitattn_tools.demo_config import config_root

    init_default_scope('mmdet')
    det_cfg = Config.fromfile(
        osp.join(config_root(), '_base_/datasets/demo_coco_instance.py'))
    det_cfg.train_dataloader.dataset.data_root = osp.join(demo_data, 'coco')
    det = DET_DATASETS.build(det_cfg.train_dataloader.dataset)
    sample = det[0]
    assert sample['inputs'].shape[-2:] == (160, 160)
    assert len(sample['data_samples'].gt_instances) >= 1

    init_default_scope('mmseg')
    seg_cfg = Config.fromfile(
        osp.join(config_root(), '_base_/datasets/demo_ade20k.py'))
    seg_cfg.val_dataloader.dataset.data_root = osp.join(demo_data, 'ade20k')
    seg = SEG_DATASETS.build(seg_cfg.val_dataloader.dataset)
    labels = seg[0]['data_samples'].gt_sem_seg.data.unique().tolist()
    # reduce_zero_label: unlabelled -> 255, classes 1..5 -> 0..4
    assert set(labels) <= {0, 1, 2, 3, 4, 255} and 255 in labels
    assert len(seg) == 50
