# Mask R-CNN L2ViT-T, 1x (paper Table 4), as the official recipe: AdamW lr
# 1e-4 wd 0.05, 12 epochs (steps at 8 and 11 after a 500-iteration warm-up)
# with the DETR-style multi-scale + crop augmentation of mmdet's Swin 3x
# recipe, which the official 1x configs use too.
_base_ = ['mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_ms-crop-3x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
custom_hooks = [dict(type='CheckpointCheckHook')]

model = dict(
    backbone=dict(
        _delete_=True,
        type='L2ViT',
        arch='tiny',
        drop_path_rate=0.1,
        out_indices=(0, 1, 2, 3),
        # The official release's L2ViT-T ImageNet-1k file (README "ImageNet-1K
        # trained models"; no checksum published), loaded as it is: the
        # backbone unwraps {'model': ..., 'model_ema': ...} and renames the
        # official keys itself. Its 'model' entry is taken, as the official
        # detection code's mmcv_custom/checkpoint.py does; add
        # state_dict_key='model_ema' for the EMA weights. mmengine downloads
        # the URL into ~/.cache/torch/hub/checkpoints/ (offline: put the
        # file there, or point checkpoint at a local copy). Optional one-off
        # conversion to our key names (drops the optimizer state):
        #   python tools/model_converters/l2vit2vitattn.py \
        #       L2ViT-Tiny-checkpoint-best-ema.pth pretrain/l2vit-t_vitattn.pth
        init_cfg=dict(
            type='Pretrained',
            checkpoint='https://github.com/ChuanyangZheng/L2ViT/releases/download/v1.0/L2ViT-Tiny-checkpoint-best-ema.pth'  # noqa: E501
        )),
    neck=dict(in_channels=[96, 192, 384, 768]))

max_epochs = 12
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    dict(
        type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=500),
    dict(
        type='MultiStepLR',
        begin=0,
        end=max_epochs,
        by_epoch=True,
        milestones=[8, 11],
        gamma=0.1)
]

# AdamW lr 1e-4 wd 0.05 on every parameter: the official configs set no
# paramwise_cfg (so norms and temperatures decay too), fp32 ("do not use
# mmdet version fp16"), no gradient clipping.
optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(
        type='AdamW', lr=0.0001, betas=(0.9, 0.999), weight_decay=0.05))

# Sources: the six official Mask R-CNN configs (1x / 3x, tiny / small /
# base) share everything but the schedule and the drop path rate.
_OFFICIAL = ('official: L2ViT/object_detection/configs/L2ViT/'
             'maskrcnn_*_l2vit_v0_*_coco.py')
recipe_sources = dict(
    optimizer=_OFFICIAL,
    lr=_OFFICIAL,
    weight_decay=_OFFICIAL + ' (no paramwise_cfg: every parameter decays)',
    batch='official: L2ViT/object_detection/configs/_base_/datasets/'
    'coco_instance.py (2 images per GPU; 8 GPUs as Swin, which paper Sec. '
    '5.2 follows)',
    schedule='official: L2ViT/object_detection/configs/L2ViT/'
    'maskrcnn_1x_l2vit_v0_tiny_coco.py (schedule_1x: 12 epochs, steps 8 / '
    '11; paper Table 4: 1x)',
    warmup='official: L2ViT/object_detection/configs/_base_/schedules/'
    'schedule_1x.py (500 iterations from 0.001x)',
    drop_path='official: L2ViT/object_detection/configs/L2ViT/'
    'maskrcnn_1x_l2vit_v0_tiny_coco.py (0.1)',
    clip_grad=_OFFICIAL + ' (grad_clip None)',
    ema=_OFFICIAL + ' (none)',
    augmentation=_OFFICIAL + ' (DETR-style multi-scale 480-800 + crop, '
    'also for 1x)',
    amp=_OFFICIAL + ' (fp32: "do not use mmdet version fp16")',
    pretrained='official: L2ViT/readme.md (release v1.0 '
    "L2ViT-Tiny-checkpoint-best-ema.pth; its 'model' entry, as "
    'object_detection/mmcv_custom/checkpoint.py loads it)')
