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

_PVT_FPN = ('paper: PVT Section 5.2 (Semantic FPN: batch 16, 80k, AdamW '
            '1e-4, poly 0.9), the recipe of the LaViT PVT-S row')
recipe_sources = dict(
    drop_path='openmmlab: mmdet PyramidVisionTransformer default 0.1 (the '
    "value of PVT's own dense-prediction backbones)",
    optimizer=_PVT_FPN,
    lr=_PVT_FPN,
    weight_decay=_PVT_FPN + ' (1e-4, whai362/PVT segmentation configs)',
    batch=_PVT_FPN,
    schedule=_PVT_FPN,
    warmup=_PVT_FPN + ' (no warm-up)',
    pretrained='official: whai362/PVT release v2 pvt_small.pth (direct URL)')
