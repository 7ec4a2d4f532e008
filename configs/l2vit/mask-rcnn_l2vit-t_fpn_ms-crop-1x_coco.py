# Mask R-CNN L2ViT-T, 1x (paper Table 4), as the official recipe: AdamW lr
# 1e-4 wd 0.05, 12 epochs (steps at 8 and 11 after a 500-iteration warm-up)
# with the DETR-style multi-scale + crop augmentation of mmdet's Swin 3x
# recipe, which the official 1x configs use too.
_base_ = ['mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_ms-crop-3x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='L2ViT',
        arch='tiny',
        drop_path_rate=0.1,
        out_indices=(0, 1, 2, 3),
        # Official L2ViT-Tiny-checkpoint-best-ema.pth ({'model': ...,
        # 'model_ema': ...}, official key names); 'model' is what the
        # official detection code loaded (state_dict_key='model_ema' for EMA).
        init_cfg=dict(
            type='Pretrained',
            checkpoint='pretrain/L2ViT-Tiny-checkpoint-best-ema.pth')),
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

# No weight decay on norms (every LayerNorm / BatchNorm of L2ViT has 'norm'
# in its name) or on the linear attention's temperatures.
optim_wrapper = dict(
    paramwise_cfg=dict(
        _delete_=True,
        custom_keys={
            'norm': dict(decay_mult=0.),
            'temperature': dict(decay_mult=0.)
        }))
