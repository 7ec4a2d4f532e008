# RetinaNet Swin-T+LA 1x, COCO: mmdet's RetinaNet Swin-T 1x model (the LaViT
# / L2ViT tables' "Swin-T 39M / 245G" baseline) with the Less-Attention
# Swin-T backbone, trained with the LaViT paper's RetinaNet recipe (PVT's:
# AdamW lr 1e-4, wd 1e-4, batch 16; mmdet's Swin file keeps RetinaNet's SGD).
# AuxLossRetinaNet adds the backbone's diagonality-preserving loss as
# `loss_dp`.
_base_ = ['mmdet::swin/retinanet_swin-t-p4-w7_fpn_1x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
custom_hooks = [dict(type='CheckpointCheckHook')]

model = dict(
    type='AuxLossRetinaNet',
    backbone=dict(
        _delete_=True,
        type='LessAttnSwinTransformer',
        arch='tiny',
        drop_path_rate=0.2,
        dp_loss_weight=0.1,
        # Stage 1 feeds no FPN level, so its output norm is left out (every
        # parameter used: no find_unused_parameters). No official weights:
        # ImageNet-1k weights trained with
        # configs/lavit/swin-t-la_16xb64_in1k.py.
        out_indices=(1, 2, 3),
        init_cfg=dict(
            type='Pretrained', checkpoint='pretrain/swin_t_la_in1k.pth')))

# No decay on norms, Swin's relative position bias, the attention
# residual's LayerScale or the identity-initialised Less-Attention
# transforms.
optim_wrapper = dict(
    optimizer=dict(
        _delete_=True, type='AdamW', lr=0.0001, weight_decay=0.0001),
    paramwise_cfg=dict(
        custom_keys={
            'norm': dict(decay_mult=0.),
            'relative_position_bias_table': dict(decay_mult=0.),
            'layer_scale': dict(decay_mult=0.),
            'transform': dict(decay_mult=0.)
        }))

_pvt = ('openmmlab: mmdet::pvt/retinanet_pvt-t_fpn_1x_coco.py (PVT\'s '
        'RetinaNet recipe, the one behind Table 3\'s Swin rows, as '
        'configs/baselines/retinanet_swin-t-p4-w7_fpn_1x_coco.py)')
recipe_sources = dict(
    optimizer='paper: LaViT Sec. 4.4 (AdamW)',
    lr=_pvt,
    weight_decay=_pvt,
    batch='paper: LaViT Sec. 4.4 (batch 16 on 8 GPUs)',
    drop_path='openmmlab: mmdet::swin/retinanet_swin-t-p4-w7_fpn_1x_coco.py '
    '(Swin-T\'s detection value)',
    augmentation=_pvt + ' (single scale 1333x800)',
    pretrained='ours: ImageNet-1k weights trained with '
    'configs/lavit/swin-t-la_16xb64_in1k.py (no official weights exist)')
