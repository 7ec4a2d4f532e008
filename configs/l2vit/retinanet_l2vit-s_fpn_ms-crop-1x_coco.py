# RetinaNet L2ViT-S, 1x (paper Table 4); the recipe of the L2ViT-T config.
_base_ = ['./retinanet_l2vit-t_fpn_ms-crop-1x_coco.py']

model = dict(
    backbone=dict(
        arch='small',
        drop_path_rate=0.1,
        # Official L2ViT-Small-checkpoint-best-ema.pth.
        init_cfg=dict(
            checkpoint='pretrain/L2ViT-Small-checkpoint-best-ema.pth')))
