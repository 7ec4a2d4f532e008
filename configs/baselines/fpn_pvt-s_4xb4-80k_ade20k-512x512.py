# Semantic FPN PVT-S, ADE20K 80k (PVT's recipe): the LaViT table's
# "PVT-S 30.2M / 146G" row.
_base_ = ['./fpn_pvt-t_4xb4-80k_ade20k-512x512.py']

model = dict(
    backbone=dict(
        num_layers=[3, 4, 6, 3],
        init_cfg=dict(
            type='Pretrained',
            checkpoint='https://github.com/whai362/PVT/releases/download/'
            'v2/pvt_small.pth')))
