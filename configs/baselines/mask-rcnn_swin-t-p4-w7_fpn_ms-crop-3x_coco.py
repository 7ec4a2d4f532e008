# Mask R-CNN Swin-T 3x (multi-scale crop): the FLatten Table 2 "Swin-T 267G /
# 48M 3x" row (46.0 / 41.6), copied from the Swin release
# (Swin-Transformer-Object-Detection mask_rcnn_swin_tiny_patch4_window7_
# mstrain_480-800_adamw_3x_coco.py). mmdet's config reproduces that
# pipeline, optimizer, drop path (0.2) and schedule; the two differences
# (1000 warm-up iterations and fp32 in mmdet) are set to the release's here.
_base_ = ['mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_ms-crop-3x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
custom_hooks = [dict(type='CheckpointCheckHook')]

_SWIN_3X = ('official: Swin-Transformer-Object-Detection/configs/swin/'
            'mask_rcnn_swin_tiny_patch4_window7_mstrain_480-800_adamw_3x_'
            'coco.py')

max_epochs = 36
# 500 linear warm-up iterations (the release's schedule_1x base).
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0,
         end=500),
    dict(
        type='MultiStepLR',
        begin=0,
        end=max_epochs,
        by_epoch=True,
        milestones=[27, 33],
        gamma=0.1)
]
# fp16 with dynamic loss scaling (the release's use_fp16=True); bf16
# autocast without CUDA.
optim_wrapper = dict(type='AmpOptimWrapper', loss_scale='dynamic')

recipe_sources = dict(
    optimizer=_SWIN_3X,
    lr=_SWIN_3X,
    weight_decay=_SWIN_3X,
    batch=_SWIN_3X + ' (2 images x 8 GPUs)',
    schedule=_SWIN_3X + ' (36 epochs, steps 27 / 33)',
    warmup=_SWIN_3X + ' (500 iterations)',
    drop_path=_SWIN_3X,
    clip_grad=_SWIN_3X,
    augmentation='paper: FLatten Table 2 (Swin release multi-scale '
    '480-800 + crop; openmmlab: mmdet::swin/'
    'mask-rcnn_swin-t-p4-w7_fpn_ms-crop-3x_coco.py is the same pipeline)',
    amp=_SWIN_3X + ' (fp16)',
    pretrained='official: Swin-Transformer release v1.0.0 '
    'swin_tiny_patch4_window7_224.pth (direct URL)')
