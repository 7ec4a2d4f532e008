# RetinaNet L2ViT-T, 1x (paper Table 4), as the official recipe: AdamW lr 1e-4
# wd 0.05, 12 epochs (steps at 8 and 11 after a 500-iteration warm-up), the
# DETR-style multi-scale + crop augmentation even for 1x, and three backbone
# outputs (strides 8-32) with FPN extra levels convolved from the input.
_base_ = ['mmdet::swin/retinanet_swin-t-p4-w7_fpn_1x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='L2ViT',
        arch='tiny',
        drop_path_rate=0.1,
        out_indices=(1, 2, 3),
        # Official L2ViT-Tiny-checkpoint-best-ema.pth ({'model': ...,
        # 'model_ema': ...}, official key names); 'model' is what the
        # official detection code loaded (state_dict_key='model_ema' for EMA).
        init_cfg=dict(
            type='Pretrained',
            checkpoint='pretrain/L2ViT-Tiny-checkpoint-best-ema.pth')),
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

# No weight decay on norms (every LayerNorm / BatchNorm of L2ViT has 'norm'
# in its name) or on the linear attention's temperatures.
optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(
        type='AdamW', lr=0.0001, betas=(0.9, 0.999), weight_decay=0.05),
    paramwise_cfg=dict(
        custom_keys={
            'norm': dict(decay_mult=0.),
            'temperature': dict(decay_mult=0.)
        }))
