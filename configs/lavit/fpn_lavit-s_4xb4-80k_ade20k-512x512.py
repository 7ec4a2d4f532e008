# Semantic FPN LaViT-S, ADE20K 80k (paper Table 4). The paper follows Swin's
# segmentation settings: AdamW lr 6e-5, poly decay, batch 16.
_base_ = ['mmseg::sem_fpn/fpn_r50_4xb4-160k_ade20k-512x512.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
custom_hooks = [dict(type='CheckpointCheckHook')]

model = dict(
    type='AuxLossEncoderDecoder',
    pretrained=None,
    backbone=dict(
        _delete_=True,
        type='LaViT',
        arch='small',
        drop_path_rate=0.1,
        dp_loss_weight=0.1,
        out_indices=(0, 1, 2, 3),
        # ImageNet-1k weights from configs/lavit/lavit-s_4xb256_in1k.py (no
        # official LaViT weights exist).
        init_cfg=dict(
            type='Pretrained', checkpoint='pretrain/lavit_s_in1k.pth')),
    neck=dict(in_channels=[64, 128, 320, 512]))

# No weight decay on norms, position embeddings, the attention residual's
# LayerScale or the Less-Attention transforms (identity-initialised).
optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(
        type='AdamW', lr=0.00006, betas=(0.9, 0.999), weight_decay=0.01),
    paramwise_cfg=dict(
        custom_keys={
            'norm': dict(decay_mult=0.),
            'pos_embed': dict(decay_mult=0.),
            'layer_scale': dict(decay_mult=0.),
            'transform': dict(decay_mult=0.)
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
train_cfg = dict(max_iters=80000, val_interval=8000)
default_hooks = dict(checkpoint=dict(interval=8000))

_swin = ('openmmlab: mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_'
         '8xb2-160k_ade20k-512x512.py (LaViT Sec. 4.5 follows Swin\'s '
         'segmentation settings)')
recipe_sources = dict(
    optimizer=_swin,
    lr='paper: LaViT Sec. 4.5 (6e-5, poly)',
    weight_decay=_swin,
    batch='paper: LaViT Sec. 4.5 (16 on 4 GPUs)',
    schedule='paper: LaViT Sec. 4.5 (Semantic FPN 80k iterations, poly)',
    warmup=_swin,
    drop_path='ours: 0.1 as in LaViT-S\'s ImageNet training (the paper '
    'gives none)',
    augmentation='paper: LaViT Sec. 4.5 (512x512 crops, Swin\'s settings)',
    pretrained='ours: ImageNet-1k weights trained with '
    'configs/lavit/lavit-s_4xb256_in1k.py (no official LaViT weights exist)')
