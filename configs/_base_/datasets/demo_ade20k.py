# Embedded demo data in ADE20K layout (images/, annotations/ with label 0 =
# unlabelled, reduce_zero_label=True), 128x128 scenes of sky, ground and
# shapes. Generate it with `python tools/make_demo_data.py`.
dataset_type = 'BaseSegDataset'
data_root = 'data/demo/ade20k'
metainfo = dict(
    classes=('sky', 'ground', 'circle', 'square', 'triangle'),
    palette=[[120, 180, 230], [110, 90, 60], [220, 40, 40], [40, 200, 60],
             [240, 200, 20]])
num_classes = 5
crop_size = (128, 128)
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(
        type='RandomResize',
        scale=(128, 128),
        ratio_range=(1.0, 1.5),
        keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(128, 128), keep_ratio=True),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='PackSegInputs')
]
train_dataloader = dict(
    batch_size=4,
    num_workers=0,
    persistent_workers=False,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        metainfo=metainfo,
        img_suffix='.jpg',
        seg_map_suffix='.png',
        reduce_zero_label=True,
        data_prefix=dict(
            img_path='images/training', seg_map_path='annotations/training'),
        pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=1,
    num_workers=0,
    persistent_workers=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        metainfo=metainfo,
        img_suffix='.jpg',
        seg_map_suffix='.png',
        reduce_zero_label=True,
        data_prefix=dict(
            img_path='images/validation',
            seg_map_path='annotations/validation'),
        pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(type='IoUMetric', iou_metrics=['mIoU'])
test_evaluator = val_evaluator
