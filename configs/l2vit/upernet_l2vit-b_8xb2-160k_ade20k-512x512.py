# UperNet L2ViT-B, ADE20K 160k (paper Table 5); the recipe of the L2ViT-T
# config.
_base_ = ['./upernet_l2vit-t_8xb2-160k_ade20k-512x512.py']

model = dict(
    backbone=dict(
        arch='base',
        # Official L2ViT-Base-checkpoint-best-ema.pth.
        init_cfg=dict(
            checkpoint='pretrain/L2ViT-Base-checkpoint-best-ema.pth')),
    decode_head=dict(in_channels=[128, 256, 512, 1024]),
    auxiliary_head=dict(in_channels=512))
