"""Deterministic demo datasets: no download, generated in seconds.

Scenes of coloured geometric shapes on textured backgrounds, written in the
on-disk formats of the real benchmarks so that the real loaders, pipelines
and evaluators run on them:

* ``coco/``: COCO instance segmentation (``annotations/instances_{train,val}
  .json`` with polygon masks, images in ``train/`` and ``val/``), classes
  circle / square / triangle.
* ``ade20k/``: ADE20K layout (``images/{training,validation}/*.jpg``,
  ``annotations/.../*.png``), label 0 = unlabelled (``reduce_zero_label``),
  1..5 = sky, ground, circle, square, triangle.
* ``imagenet/``: class-per-folder classification (``train/<class>/*.png``).

Objects never overlap, so every polygon is exactly the visible mask.
"""
import json
import math
import os
import os.path as osp
from typing import Dict, List, Optional, Tuple

import cv2
import numpy as np
from pycocotools import mask as mask_utils

SHAPE_CLASSES = ('circle', 'square', 'triangle')
SEG_CLASSES = ('sky', 'ground') + SHAPE_CLASSES
SEG_PALETTE = [[120, 180, 230], [110, 90, 60], [220, 40, 40], [40, 200, 60],
               [240, 200, 20]]
#: Bumped whenever the generator's output changes, so stale data is remade.
DEMO_DATA_VERSION = 2

Polygon = np.ndarray  # (K, 2) float32, x-y


def _shape_polygon(kind: str, cx: float, cy: float, radius: float,
                   angle: float) -> Polygon:
    if kind == 'circle':
        n, angle = 32, 0.0
    elif kind == 'square':
        n = 4
    elif kind == 'triangle':
        n = 3
    else:
        raise ValueError(f'unknown shape {kind}')
    t = angle + np.arange(n) * 2 * math.pi / n
    return np.stack([cx + radius * np.cos(t), cy + radius * np.sin(t)],
                    axis=1).astype(np.float32)


def _background(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """A smooth colour gradient plus noise, so pixels alone do not tell."""
    c0, c1 = rng.uniform(40, 215, size=(2, 3))
    ramp = np.linspace(0.0, 1.0, w if rng.random() < 0.5 else h)
    ramp = ramp[None, :, None] if ramp.shape[0] == w else ramp[:, None, None]
    img = c0 + (c1 - c0) * ramp
    img = np.broadcast_to(img, (h, w, 3)) + rng.normal(0, 8, (h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def _distinct_colour(rng: np.random.Generator,
                     avoid: np.ndarray) -> Tuple[int, int, int]:
    for _ in range(50):
        colour = rng.integers(0, 256, size=3)
        if np.abs(colour.astype(int) - avoid.astype(int)).sum() > 150:
            break
    return tuple(int(c) for c in colour)


def _place_shapes(rng: np.random.Generator, h: int, w: int, max_objects: int,
                  radius_range: Tuple[float, float],
                  region: Optional[Tuple[int, int]] = None
                  ) -> List[Tuple[str, Polygon]]:
    """Non-overlapping shapes: (kind, polygon) pairs."""
    y0, y1 = region if region is not None else (0, h)
    placed: List[Tuple[float, float, float]] = []
    shapes = []
    for _ in range(int(rng.integers(1, max_objects + 1))):
        for _attempt in range(30):
            r = rng.uniform(*radius_range)
            cx = rng.uniform(r + 1, w - r - 1)
            cy = rng.uniform(max(y0, 0) + r + 1, min(y1, h) - r - 1)
            if all(math.hypot(cx - px, cy - py) > r + pr + 3
                   for px, py, pr in placed):
                break
        else:
            continue
        kind = SHAPE_CLASSES[int(rng.integers(len(SHAPE_CLASSES)))]
        placed.append((cx, cy, r))
        shapes.append((kind,
                       _shape_polygon(kind, cx, cy, r,
                                      rng.uniform(0, 2 * math.pi))))
    return shapes


def _fill(img: np.ndarray, polygon: Polygon, value) -> None:
    # 4 fractional bits keep the raster consistent with the float polygon.
    pts = np.round(polygon * 16).astype(np.int32)
    cv2.fillPoly(img, [pts], value, lineType=cv2.LINE_8, shift=4)


def _render_scene(rng: np.random.Generator, h: int, w: int,
                  max_objects: int) -> Tuple[np.ndarray, list]:
    """An RGB scene of non-overlapping shapes and its (kind, polygon)s."""
    img = _background(rng, h, w)
    bg_mean = img.reshape(-1, 3).mean(0)
    shapes = _place_shapes(rng, h, w, max_objects,
                           (0.1 * min(h, w), 0.25 * min(h, w)))
    for _, polygon in shapes:
        _fill(img, polygon, _distinct_colour(rng, bg_mean))
    return img, shapes


def render_demo_image(seed: int = 0,
                      size: Tuple[int, int] = (224, 224),
                      max_objects: int = 3) -> np.ndarray:
    """One demo-style scene as an RGB ``uint8`` array, drawn in memory
    (e.g. the default input of ``tools/visualize_attention.py``)."""
    return _render_scene(np.random.default_rng(seed), *size, max_objects)[0]


def _write_coco_split(root: str, split: str, num_images: int, seed: int,
                      size: Tuple[int, int], max_objects: int) -> str:
    rng = np.random.default_rng(seed)
    h, w = size
    os.makedirs(osp.join(root, split), exist_ok=True)
    images, annotations = [], []
    for image_id in range(1, num_images + 1):
        img, shapes = _render_scene(rng, h, w, max_objects)
        for kind, polygon in shapes:
            segmentation = [polygon.reshape(-1).round(2).tolist()]
            # As in COCO: the box bounds the polygon, the area is the
            # polygon's rasterised area.
            (x0, y0), (x1, y1) = polygon.min(0), polygon.max(0)
            area = mask_utils.area(
                mask_utils.merge(mask_utils.frPyObjects(segmentation, h, w)))
            annotations.append(
                dict(id=len(annotations) + 1,
                     image_id=image_id,
                     category_id=SHAPE_CLASSES.index(kind) + 1,
                     bbox=[round(float(v), 2)
                           for v in (x0, y0, x1 - x0, y1 - y0)],
                     area=float(area),
                     segmentation=segmentation,
                     iscrowd=0))
        file_name = f'{image_id:06d}.jpg'
        cv2.imwrite(osp.join(root, split, file_name), img[..., ::-1],
                    [cv2.IMWRITE_JPEG_QUALITY, 95])
        images.append(dict(id=image_id, file_name=file_name, height=h,
                           width=w))
    categories = [dict(id=i + 1, name=n, supercategory='shape')
                  for i, n in enumerate(SHAPE_CLASSES)]
    ann_file = osp.join(root, 'annotations', f'instances_{split}.json')
    os.makedirs(osp.dirname(ann_file), exist_ok=True)
    with open(ann_file, 'w') as f:
        json.dump(dict(images=images, annotations=annotations,
                       categories=categories), f)
    return ann_file


def _write_ade_split(root: str, split: str, num_images: int, seed: int,
                     size: Tuple[int, int], max_objects: int) -> None:
    rng = np.random.default_rng(seed)
    h, w = size
    img_dir = osp.join(root, 'images', split)
    ann_dir = osp.join(root, 'annotations', split)
    os.makedirs(img_dir, exist_ok=True)
    os.makedirs(ann_dir, exist_ok=True)
    for index in range(num_images):
        img = _background(rng, h, w)
        label = np.zeros((h, w), np.uint8)
        horizon = int(rng.uniform(0.3, 0.6) * h)
        sky = np.array(SEG_PALETTE[0]) + rng.normal(0, 15, 3)
        ground = np.array(SEG_PALETTE[1]) + rng.normal(0, 15, 3)
        img[:horizon] = np.clip(img[:horizon] * 0.3 + sky * 0.7, 0, 255)
        img[horizon:] = np.clip(img[horizon:] * 0.3 + ground * 0.7, 0, 255)
        label[:horizon] = SEG_CLASSES.index('sky') + 1
        label[horizon:] = SEG_CLASSES.index('ground') + 1
        for kind, polygon in _place_shapes(
                rng, h, w, max_objects, (0.08 * min(h, w), 0.2 * min(h, w))):
            _fill(img, polygon, _distinct_colour(rng, img.mean((0, 1))))
            _fill(label, polygon, SEG_CLASSES.index(kind) + 1)
        # A thin unlabelled band, as ADE20K has unlabelled pixels (label 0).
        label[horizon - 1:horizon + 1] = 0
        name = f'ADE_demo_{split}_{index:06d}'
        cv2.imwrite(osp.join(img_dir, name + '.jpg'), img[..., ::-1],
                    [cv2.IMWRITE_JPEG_QUALITY, 95])
        cv2.imwrite(osp.join(ann_dir, name + '.png'), label)


def _write_cls_split(root: str, split: str, num_per_class: int, seed: int,
                     size: Tuple[int, int]) -> None:
    rng = np.random.default_rng(seed)
    h, w = size
    for cls_index, kind in enumerate(SHAPE_CLASSES):
        out_dir = osp.join(root, split, kind)
        os.makedirs(out_dir, exist_ok=True)
        for index in range(num_per_class):
            img = _background(rng, h, w)
            r = rng.uniform(0.25, 0.4) * min(h, w)
            cx, cy = rng.uniform(r, w - r), rng.uniform(r, h - r)
            polygon = _shape_polygon(kind, cx, cy, r,
                                     rng.uniform(0, 2 * math.pi))
            _fill(img, polygon, _distinct_colour(rng, img.mean((0, 1))))
            cv2.imwrite(osp.join(out_dir, f'{index:05d}.png'), img[..., ::-1])


def generate_demo_data(root: str = 'data/demo',
                       seed: int = 0,
                       num_train: int = 200,
                       num_val: int = 50,
                       det_size: Tuple[int, int] = (160, 160),
                       seg_size: Tuple[int, int] = (128, 128),
                       cls_size: Tuple[int, int] = (64, 64),
                       force: bool = False) -> Dict[str, str]:
    """Write all demo datasets under ``root`` (skipped if already there).

    Args:
        root (str): Output folder. Default: 'data/demo'.
        seed (int): Seed; the same seed gives byte-identical files.
            Default: 0.
        num_train (int): Training images per task. Default: 200.
        num_val (int): Validation images per task. Default: 50.
        det_size (tuple[int, int]): COCO image (H, W). Default: (160, 160).
        seg_size (tuple[int, int]): ADE20K image (H, W). Default: (128, 128).
        cls_size (tuple[int, int]): Classification image (H, W).
            Default: (64, 64).
        force (bool): Regenerate even if a complete set exists.
            Default: False.

    Returns:
        dict: Paths of the ``coco``, ``ade20k`` and ``imagenet`` roots.
    """
    params = dict(version=DEMO_DATA_VERSION, seed=seed, num_train=num_train,
                  num_val=num_val, det_size=list(det_size),
                  seg_size=list(seg_size), cls_size=list(cls_size))
    paths = {name: osp.join(root, name)
             for name in ('coco', 'ade20k', 'imagenet')}
    stamp = osp.join(root, 'demo_data.json')
    if not force and osp.isfile(stamp):
        with open(stamp) as f:
            if json.load(f) == params:
                return paths
    for split, n, split_seed in (('train', num_train, seed),
                                 ('val', num_val, seed + 1)):
        _write_coco_split(paths['coco'], split, n, split_seed, det_size, 3)
        ade_split = 'training' if split == 'train' else 'validation'
        _write_ade_split(paths['ade20k'], ade_split, n, split_seed + 100,
                         seg_size, 3)
        _write_cls_split(paths['imagenet'], split,
                         max(n // len(SHAPE_CLASSES), 2), split_seed + 200,
                         cls_size)
    with open(stamp, 'w') as f:
        json.dump(params, f)
    return paths
