# RetinaNet Swin-T+LA 1x, COCO: mmdet's RetinaNet Swin-T 1x recipe (AdamW
# lr 1e-4, wd 0.05, batch 16; the LaViT / L2ViT tables' "Swin-T 39M / 245G"
# baseline) with the Less-Attention Swin-T backbone; RetinaNet is the LaViT
# paper's own detector. AuxLossRetinaNet adds the backbone's
# diagonality-preserving loss as `loss_dp`.
_base_ = ['mmdet::swin/retinanet_swin-t-p4-w7_fpn_1x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

model = dict(
    type='AuxLossRetinaNet',
    backbone=dict(
        _delete_=True,
        type='LessAttnSwinTransformer',
        arch='tiny',
        drop_path_rate=0.2,
        dp_loss_weight=0.1,
        out_indices=(1, 2, 3),
        # Stage 1 feeds no FPN level, so its output norm is left out (every
        # parameter used: no find_unused_parameters). No official weights:
        # ImageNet-1k weights trained with
        # configs/lavit/swin-t-la_16xb64_in1k.py.
        init_cfg=dict(
            type='Pretrained', checkpoint='pretrain/swin_t_la_in1k.pth')))

# As mmdet's Swin recipes, plus no decay on the attention residual's
# LayerScale and the identity-initialised Less-Attention transforms.
optim_wrapper = dict(
    paramwise_cfg=dict(
        custom_keys={
            'absolute_pos_embed': dict(decay_mult=0.),
            'relative_position_bias_table': dict(decay_mult=0.),
            'norm': dict(decay_mult=0.),
            'layer_scale': dict(decay_mult=0.),
            'transform': dict(decay_mult=0.)
        }))
