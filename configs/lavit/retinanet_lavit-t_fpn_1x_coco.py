# RetinaNet LaViT-T 1x, COCO (paper Table 3): PVT's RetinaNet recipe (AdamW
# lr 1e-4, wd 1e-4, batch 16) with the LaViT backbone. AuxLossRetinaNet adds
# the backbone's diagonality-preserving loss to the losses as `loss_dp`.
_base_ = ['mmdet::pvt/retinanet_pvt-t_fpn_1x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
custom_hooks = [dict(type='CheckpointCheckHook')]

model = dict(
    type='AuxLossRetinaNet',
    backbone=dict(
        _delete_=True,
        type='LaViT',
        arch='tiny',
        drop_path_rate=0.1,
        dp_loss_weight=0.1,
        # Stage 1 feeds no FPN level: leaving it out keeps every parameter
        # used (distributed training without find_unused_parameters).
        out_indices=(1, 2, 3),
        # No official LaViT weights exist: ImageNet-1k weights trained with
        # configs/lavit/lavit-t_4xb256_in1k.py (the mmpretrain checkpoint
        # loads as is, its `backbone.` prefix stripped).
        init_cfg=dict(
            type='Pretrained', checkpoint='pretrain/lavit_t_in1k.pth')),
    neck=dict(in_channels=[128, 320, 512], start_level=0))

# No weight decay on norms, position embeddings, the attention residual's
# LayerScale or the Less-Attention transforms (decay would pull them from
# their identity initialisation towards all-zero, i.e. uniform attention).
optim_wrapper = dict(
    paramwise_cfg=dict(
        custom_keys={
            'norm': dict(decay_mult=0.),
            'pos_embed': dict(decay_mult=0.),
            'layer_scale': dict(decay_mult=0.),
            'transform': dict(decay_mult=0.)
        }))

_pvt = ('openmmlab: mmdet::pvt/retinanet_pvt-t_fpn_1x_coco.py (PVT\'s '
        'RetinaNet recipe, the one behind Table 3\'s PVT rows)')
recipe_sources = dict(
    optimizer='paper: LaViT Sec. 4.4 (AdamW)',
    lr=_pvt,
    weight_decay=_pvt,
    batch='paper: LaViT Sec. 4.4 (batch 16 on 8 GPUs)',
    schedule='paper: LaViT Table 3 (1x = 12 epochs)',
    warmup=_pvt,
    drop_path='openmmlab: mmdet::pvt/retinanet_pvt-t_fpn_1x_coco.py (PVT '
    'backbones\' 0.1; the paper gives none)',
    clip_grad=_pvt,
    ema=_pvt,
    augmentation=_pvt + ' (single scale 1333x800)',
    amp=_pvt,
    pretrained='ours: ImageNet-1k weights trained with '
    'configs/lavit/lavit-t_4xb256_in1k.py (no official LaViT weights exist)')
