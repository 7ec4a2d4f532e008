# RetinaNet LaViT-T 3x with multi-scale training, COCO (paper Table 3):
# shorter side 640-800 (mmdet's ms-3x recipe), 36 epochs, steps at 27 / 33.
_base_ = ['./retinanet_lavit-t_fpn_1x_coco.py']

train_pipeline = [
    dict(type='LoadImageFromFile', backend_args={{_base_.backend_args}}),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(
        type='RandomResize', scale=[(1333, 640), (1333, 800)],
        keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs')
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))

max_epochs = 36
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    dict(
        type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=500),
    dict(
        type='MultiStepLR',
        begin=0,
        end=max_epochs,
        by_epoch=True,
        milestones=[27, 33],
        gamma=0.1)
]

recipe_sources = dict(
    schedule='paper: LaViT Table 3 (3x = 36 epochs); steps 27 / 33 as '
    'mmdet\'s ms-3x recipes',
    augmentation='paper: LaViT Table 3 (3x + MS; its PVT-S 42.2 row is '
    'PVT\'s 3x protocol, shorter side 640-800)')
