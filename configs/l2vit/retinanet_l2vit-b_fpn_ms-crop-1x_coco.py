# RetinaNet L2ViT-B, 1x (paper Table 4); the recipe of the L2ViT-T config.
_base_ = ['./retinanet_l2vit-t_fpn_ms-crop-1x_coco.py']

model = dict(
    backbone=dict(
        arch='base',
        drop_path_rate=0.2,
        # Official L2ViT-Base-checkpoint-best-ema.pth.
        init_cfg=dict(
            checkpoint='pretrain/L2ViT-Base-checkpoint-best-ema.pth')),
    neck=dict(in_channels=[256, 512, 1024]))
