# mmseg's Semantic FPN R50 recipe at the 80k schedule of the PVT / LaViT
# tables: the LaViT table's "ResNet-50 28.5M / 183G" Semantic FPN row.
_base_ = ['mmseg::sem_fpn/fpn_r50_4xb4-160k_ade20k-512x512.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
custom_hooks = [dict(type='CheckpointCheckHook')]

param_scheduler = [
    dict(
        type='PolyLR',
        eta_min=1e-4,
        power=0.9,
        begin=0,
        end=80000,
        by_epoch=False)
]
train_cfg = dict(max_iters=80000, val_interval=8000)
default_hooks = dict(checkpoint=dict(interval=8000))

recipe_sources = dict(
    schedule='paper: LaViT Table 4 / PVT Section 5.2 (Semantic FPN 80k; '
    "mmseg's R50 recipe otherwise)")
