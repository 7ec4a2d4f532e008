# RetinaNet L2ViT-T, 1x (paper Table 4), as the official recipe: AdamW lr 1e-4
# wd 0.05, 12 epochs (steps at 8 and 11 after a 500-iteration warm-up), the
# DETR-style multi-scale + crop augmentation even for 1x, and three backbone
# outputs (strides 8-32) with FPN extra levels convolved from the input.
_base_ = ['mmdet::swin/retinanet_swin-t-p4-w7_fpn_1x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
custom_hooks = [dict(type='CheckpointCheckHook')]

model = dict(
    backbone=dict(
        _delete_=True,
        type='L2ViT',
        arch='tiny',
        drop_path_rate=0.1,
        out_indices=(1, 2, 3),
        # The official release's L2ViT-T ImageNet-1k file, loaded as it is
        # ('model' entry, as the official detection code loads it); see
        # mask-rcnn_l2vit-t_fpn_ms-crop-1x_coco.py for the EMA weights,
        # offline use and the optional conversion:
        #   python tools/model_converters/l2vit2vitattn.py \
        #       L2ViT-Tiny-checkpoint-best-ema.pth pretrain/l2vit-t_vitattn.pth
        init_cfg=dict(
            type='Pretrained',
            checkpoint='https://github.com/ChuanyangZheng/L2ViT/releases/download/v1.0/L2ViT-Tiny-checkpoint-best-ema.pth'  # noqa: E501
        )),
    neck=dict(
        in_channels=[192, 384, 768],
        start_level=0,
        add_extra_convs='on_input',
        num_outs=5))

train_pipeline = [
    dict(type='LoadImageFromFile', backend_args={{_base_.backend_args}}),
    dict(type='LoadAnnotations', with_bbox=True),
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

param_scheduler = [
    dict(
        type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=500),
    dict(
        type='MultiStepLR',
        begin=0,
        end=12,
        by_epoch=True,
        milestones=[8, 11],
        gamma=0.1)
]

# AdamW lr 1e-4 wd 0.05 on every parameter: the official configs set no
# paramwise_cfg (so norms and temperatures decay too); fp32, no clipping.
optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(
        type='AdamW', lr=0.0001, betas=(0.9, 0.999), weight_decay=0.05))

# Sources: the official RetinaNet configs (1x / 3x, tiny / small / base)
# share everything but the schedule and the drop path rate.
_OFFICIAL = ('official: L2ViT/object_detection/configs/L2ViT/'
             'retinanet_*_l2vit_v0_*_coco.py')
recipe_sources = dict(
    optimizer=_OFFICIAL,
    lr=_OFFICIAL,
    weight_decay=_OFFICIAL + ' (no paramwise_cfg: every parameter decays)',
    batch='official: L2ViT/object_detection/configs/_base_/datasets/'
    'coco_detection.py (2 images per GPU; 8 GPUs as Swin, which paper Sec. '
    '5.2 follows)',
    schedule='official: L2ViT/object_detection/configs/L2ViT/'
    'retinanet_1x_l2vit_v0_tiny_coco.py (schedule_1x: 12 epochs, steps 8 / '
    '11; paper Table 4: 1x)',
    warmup='official: L2ViT/object_detection/configs/_base_/schedules/'
    'schedule_1x.py (500 iterations from 0.001x)',
    drop_path='official: L2ViT/object_detection/configs/L2ViT/'
    'retinanet_1x_l2vit_v0_tiny_coco.py (0.1)',
    clip_grad=_OFFICIAL + ' (grad_clip None)',
    ema=_OFFICIAL + ' (none)',
    augmentation=_OFFICIAL + ' (DETR-style multi-scale 480-800 + crop, '
    'also for 1x)',
    amp=_OFFICIAL + ' (fp32; no fp16 setting)',
    pretrained='official: L2ViT/readme.md (release v1.0 '
    "L2ViT-Tiny-checkpoint-best-ema.pth; its 'model' entry, as "
    'object_detection/mmcv_custom/checkpoint.py loads it)')
