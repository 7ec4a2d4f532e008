# Cascade Mask R-CNN Swin-T 3x as the Swin release trained it
# (Swin-Transformer-Object-Detection cascade_mask_rcnn_swin_tiny_patch4_
# window7_mstrain_480-800_giou_4conv1f_adamw_3x_coco.py: 4conv1fc box heads
# with SyncBN and GIoU, multi-scale crop, AdamW 1e-4 wd 0.05, batch 16, 36
# epochs [27, 33], 500 warm-up iterations, fp16, drop path 0.2); mmdet 3.x
# ships no Cascade Swin. The FLatten Table 2 "Swin-T 745G / 86M" row
# (50.4 / 43.7, the release's number).
_base_ = ['mmdet::cascade_rcnn/cascade-mask-rcnn_r50_fpn_1x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
custom_hooks = [dict(type='CheckpointCheckHook')]

pretrained = 'https://github.com/SwinTransformer/storage/releases/download/v1.0.0/swin_tiny_patch4_window7_224.pth'  # noqa
model = dict(
    backbone=dict(
        _delete_=True,
        type='SwinTransformer',
        embed_dims=96,
        depths=[2, 2, 6, 2],
        num_heads=[3, 6, 12, 24],
        window_size=7,
        mlp_ratio=4,
        qkv_bias=True,
        drop_path_rate=0.2,
        patch_norm=True,
        out_indices=(0, 1, 2, 3),
        convert_weights=True,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(in_channels=[96, 192, 384, 768]),
    roi_head=dict(bbox_head=[
        dict(
            type='ConvFCBBoxHead',
            num_shared_convs=4,
            num_shared_fcs=1,
            in_channels=256,
            conv_out_channels=256,
            fc_out_channels=1024,
            roi_feat_size=7,
            num_classes=80,
            bbox_coder=dict(
                type='DeltaXYWHBBoxCoder',
                target_means=[0., 0., 0., 0.],
                target_stds=target_stds),
            reg_class_agnostic=False,
            reg_decoded_bbox=True,
            norm_cfg=dict(type='SyncBN', requires_grad=True),
            loss_cls=dict(
                type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0),
            loss_bbox=dict(type='GIoULoss', loss_weight=10.0))
        for target_stds in ([0.1, 0.1, 0.2, 0.2], [0.05, 0.05, 0.1, 0.1],
                            [0.033, 0.033, 0.067, 0.067])
    ]))

# augmentation strategy originates from DETR / Sparse RCNN (as mmdet's
# mask-rcnn_swin-t-p4-w7_fpn_ms-crop-3x_coco)
train_pipeline = [
    dict(type='LoadImageFromFile', backend_args={{_base_.backend_args}}),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='RandomFlip', prob=0.5),
    dict(
        type='RandomChoice',
        transforms=[[
            dict(
                type='RandomChoiceResize',
                scales=[(480, 1333), (512, 1333), (544, 1333), (576, 1333),
                        (608, 1333), (640, 1333), (672, 1333), (704, 1333),
                        (736, 1333), (768, 1333), (800, 1333)],
                keep_ratio=True)
        ],
                    [
                        dict(
                            type='RandomChoiceResize',
                            scales=[(400, 1333), (500, 1333), (600, 1333)],
                            keep_ratio=True),
                        dict(
                            type='RandomCrop',
                            crop_type='absolute_range',
                            crop_size=(384, 600),
                            allow_negative_crop=True),
                        dict(
                            type='RandomChoiceResize',
                            scales=[(480, 1333), (512, 1333), (544, 1333),
                                    (576, 1333), (608, 1333), (640, 1333),
                                    (672, 1333), (704, 1333), (736, 1333),
                                    (768, 1333), (800, 1333)],
                            keep_ratio=True)
                    ]]),
    dict(type='PackDetInputs')
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))

max_epochs = 36
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    dict(
        type='LinearLR', start_factor=0.001, by_epoch=False, begin=0,
        end=500),  # the release's 500 warm-up iterations
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
optim_wrapper = dict(
    type='AmpOptimWrapper',
    loss_scale='dynamic',
    paramwise_cfg=dict(
        custom_keys={
            'absolute_pos_embed': dict(decay_mult=0.),
            'relative_position_bias_table': dict(decay_mult=0.),
            'norm': dict(decay_mult=0.)
        }),
    optimizer=dict(
        _delete_=True,
        type='AdamW',
        lr=0.0001,
        betas=(0.9, 0.999),
        weight_decay=0.05))

_CASCADE_3X = ('official: Swin-Transformer-Object-Detection/configs/swin/'
               'cascade_mask_rcnn_swin_tiny_patch4_window7_mstrain_480-800_'
               'giou_4conv1f_adamw_3x_coco.py')
recipe_sources = dict(
    optimizer=_CASCADE_3X,
    lr=_CASCADE_3X,
    weight_decay=_CASCADE_3X,
    batch=_CASCADE_3X + ' (2 images x 8 GPUs)',
    schedule=_CASCADE_3X + ' (36 epochs, steps 27 / 33)',
    warmup=_CASCADE_3X + ' (500 iterations)',
    drop_path=_CASCADE_3X,
    clip_grad=_CASCADE_3X,
    augmentation=_CASCADE_3X + ' (multi-scale 480-800 + crop)',
    amp=_CASCADE_3X + ' (fp16)',
    pretrained='official: Swin-Transformer release v1.0.0 '
    'swin_tiny_patch4_window7_224.pth (direct URL)')
