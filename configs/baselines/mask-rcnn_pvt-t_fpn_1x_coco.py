# Mask R-CNN PVT-T 1x (mmdet ships PVT only with RetinaNet): the FLatten
# table's "PVT-T 240G / 33M" row, baseline of mask-rcnn_flatten-pvt-t.
_base_ = ['mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
custom_hooks = [dict(type='CheckpointCheckHook')]

model = dict(
    backbone=dict(
        _delete_=True,
        type='PyramidVisionTransformer',
        num_layers=[2, 2, 2, 2],
        init_cfg=dict(
            type='Pretrained',
            checkpoint='https://github.com/whai362/PVT/releases/download/'
            'v2/pvt_tiny.pth')),
    neck=dict(in_channels=[64, 128, 320, 512]))

# PVT's released Mask R-CNN recipe (whai362/PVT, mask_rcnn_pvt_t_fpn_1x).
optim_wrapper = dict(
    optimizer=dict(
        _delete_=True, type='AdamW', lr=0.0002, weight_decay=0.0001))

_PVT_MASK = 'official: whai362/PVT detection/configs/mask_rcnn_pvt_t_fpn_1x_coco.py'
recipe_sources = dict(
    drop_path='openmmlab: mmdet PyramidVisionTransformer default 0.1 (the '
    "value of PVT's own dense-prediction backbones)",
    optimizer=_PVT_MASK,
    lr=_PVT_MASK + ' (2e-4)',
    weight_decay=_PVT_MASK + ' (1e-4)',
    batch=_PVT_MASK + ' (2 images x 8 GPUs)',
    schedule=_PVT_MASK + ' (1x)',
    augmentation='paper: FLatten Table 2 PVT-T row (the PVT paper\'s, single '
    'scale 1333x800)',
    pretrained='official: whai362/PVT release v2 pvt_tiny.pth (direct URL)')
