# UperNet L2ViT-S, ADE20K 160k (paper Table 5); the recipe of the L2ViT-T
# config.
_base_ = ['./upernet_l2vit-t_8xb2-160k_ade20k-512x512.py']

model = dict(
    backbone=dict(
        arch='small',
        # Official L2ViT-Small-checkpoint-best-ema.pth.
        init_cfg=dict(
            checkpoint='pretrain/L2ViT-Small-checkpoint-best-ema.pth')))
