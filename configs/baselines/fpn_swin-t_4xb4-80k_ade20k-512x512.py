# Semantic FPN Swin-T, ADE20K 80k (mmseg ships no such config): mmseg's
# Swin-T backbone and its UperNet optimizer settings on the Semantic FPN
# recipe. The LaViT table's "Swin-T 31.9M / 182G" Semantic FPN row.
_base_ = ['./fpn_r50_4xb4-80k_ade20k-512x512.py']

model = dict(
    pretrained=None,
    backbone=dict(
        _delete_=True,
        type='SwinTransformer',
        embed_dims=96,
        depths=[2, 2, 6, 2],
        num_heads=[3, 6, 12, 24],
        window_size=7,
        mlp_ratio=4,
        drop_path_rate=0.3,
        out_indices=(0, 1, 2, 3),
        init_cfg=dict(
            type='Pretrained',
            checkpoint='https://download.openmmlab.com/mmsegmentation/v0.5/'
            'pretrain/swin/swin_tiny_patch4_window7_224_20220317-1cdeb081.pth'
        )),
    neck=dict(in_channels=[96, 192, 384, 768]))

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(
        type='AdamW', lr=0.00006, betas=(0.9, 0.999), weight_decay=0.01),
    paramwise_cfg=dict(
        custom_keys={
            'absolute_pos_embed': dict(decay_mult=0.),
            'relative_position_bias_table': dict(decay_mult=0.),
            'norm': dict(decay_mult=0.)
        }))
param_scheduler = [
    dict(
        type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(
        type='PolyLR',
        eta_min=0.0,
        power=1.0,
        begin=1500,
        end=80000,
        by_epoch=False)
]

_SWIN_UPER = ('openmmlab: mmseg::swin/swin-tiny-patch4-window7-in1k-pre_'
              'upernet_8xb2-160k_ade20k-512x512.py')
recipe_sources = dict(
    optimizer="ours: no Swin Semantic FPN recipe was published; the Swin "
    'UperNet optimizer (' + _SWIN_UPER[11:] + ') on the 80k Semantic FPN '
    'schedule of the LaViT table',
    lr=_SWIN_UPER,
    weight_decay=_SWIN_UPER,
    schedule='paper: LaViT Table 4 (Semantic FPN 80k)',
    warmup=_SWIN_UPER + ' (1500 iterations)',
    drop_path=_SWIN_UPER + ' (0.3)',
    pretrained='openmmlab: mmseg Swin-T ImageNet weights '
    'swin_tiny_patch4_window7_224_20220317-1cdeb081.pth (direct URL)')
