# RetinaNet LaViT-T 1x, COCO (paper Table 3): PVT's RetinaNet recipe (AdamW
# lr 1e-4, wd 1e-4, batch 16) with the LaViT backbone. AuxLossRetinaNet adds
# the backbone's diagonality-preserving loss to the losses as `loss_dp`.
_base_ = ['mmdet::pvt/retinanet_pvt-t_fpn_1x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

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
