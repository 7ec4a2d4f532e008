# Semantic FPN PVT-T, ADE20K 80k (PVT's recipe; mmseg ships no PVT): the
# FLatten table's "PVT-T S-FPN 158G / 17M" row.
_base_ = ['mmseg::sem_fpn/fpn_r50_4xb4-160k_ade20k-512x512.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
custom_hooks = [dict(type='CheckpointCheckHook')]

model = dict(
    pretrained=None,
    backbone=dict(
        _delete_=True,
        type='mmdet.PyramidVisionTransformer',
        num_layers=[2, 2, 2, 2],
        init_cfg=dict(
            type='Pretrained',
            checkpoint='https://github.com/whai362/PVT/releases/download/'
            'v2/pvt_tiny.pth')),
    neck=dict(in_channels=[64, 128, 320, 512]))

# The PVT paper's schedule: batch 16, 80k iterations, AdamW 1e-4, poly 0.9
# (its repository runs the equivalent 8x4 images for 40k at lr 2e-4).
optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=0.0001, weight_decay=0.0001))
param_scheduler = [
    dict(
        type='PolyLR',
        power=0.9,
        eta_min=0.0,
        begin=0,
        end=80000,
        by_epoch=False)
]
train_cfg = dict(max_iters=80000, val_interval=8000)
default_hooks = dict(checkpoint=dict(interval=8000))

_PVT_FPN = ('paper: PVT Section 5.2 (Semantic FPN: batch 16, 80k, AdamW '
            '1e-4, poly 0.9), the recipe of the FLatten / LaViT PVT rows')
recipe_sources = dict(
    drop_path='openmmlab: mmdet PyramidVisionTransformer default 0.1 (the '
    "value of PVT's own dense-prediction backbones)",
    optimizer=_PVT_FPN,
    lr=_PVT_FPN,
    weight_decay=_PVT_FPN + ' (1e-4, whai362/PVT segmentation configs)',
    batch=_PVT_FPN,
    schedule=_PVT_FPN,
    warmup=_PVT_FPN + ' (no warm-up)',
    pretrained='official: whai362/PVT release v2 pvt_tiny.pth (direct URL)')
