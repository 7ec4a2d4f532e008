# README's demo job: Mask R-CNN with a nano FLatten-Swin (focused linear
# attention over the whole map in stages 1-2, shifted 5x5 windows in 3-4),
# trained from scratch on the embedded COCO-format demo data (160x160) on a
# CPU in a few minutes. The untrained model is evaluated first, on the same
# val split, by EvaluateBeforeTrainHook.
_base_ = [
    'mmdet::_base_/models/mask-rcnn_r50_fpn.py',
    '../_base_/datasets/demo_coco_instance.py',
    'mmdet::_base_/default_runtime.py',
]
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

dims = (32, 64, 128, 256)
channels = 64
model = dict(
    backbone=dict(
        _delete_=True,
        type='FLattenSwinTransformer',
        arch=dict(embed_dims=dims[0], depths=[1, 1, 1, 1],
                  num_heads=[1, 2, 4, 8]),
        pretrain_img_size=160,
        window_size=5,
        drop_path_rate=0.0,
        out_indices=(0, 1, 2, 3),
        init_cfg=None),
    neck=dict(in_channels=list(dims), out_channels=channels),
    rpn_head=dict(in_channels=channels, feat_channels=channels),
    roi_head=dict(
        bbox_roi_extractor=dict(out_channels=channels),
        bbox_head=dict(in_channels=channels, fc_out_channels=256,
                       num_classes=3),
        mask_roi_extractor=dict(out_channels=channels),
        mask_head=dict(in_channels=channels, conv_out_channels=channels,
                       num_classes=3)),
    # At most 3 objects per image: fewer proposals keep the CPU run short.
    train_cfg=dict(rpn_proposal=dict(nms_pre=500, max_per_img=300)),
    test_cfg=dict(
        rpn=dict(nms_pre=300, max_per_img=100),
        rcnn=dict(max_per_img=20)))

max_epochs = 8
train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=max_epochs,
                 val_interval=max_epochs)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=1e-3, betas=(0.9, 0.999),
                   weight_decay=0.05),
    paramwise_cfg=dict(
        norm_decay_mult=0.,
        custom_keys={
            'relative_position_bias_table': dict(decay_mult=0.),
            'positional_encoding': dict(decay_mult=0.),
            'attn.scale': dict(decay_mult=0.)
        }),
    clip_grad=dict(max_norm=10.0, norm_type=2))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0,
         end=50),
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True,
         milestones=[6], gamma=0.1)
]
custom_hooks = [
    dict(type='EvaluateBeforeTrainHook'),
    dict(type='CheckpointCheckHook')
]
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=10),
    checkpoint=dict(type='CheckpointHook', interval=max_epochs))
randomness = dict(seed=0)
