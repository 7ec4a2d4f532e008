# RetinaNet Swin-T 1x: the LaViT Table 3 / L2ViT Table 4 "Swin-T 39M / 245G"
# row, trained as those tables' Swin rows were: AdamW (LaViT: "AdamW, batch
# 16 on 8 GPUs" for all its detection runs), not mmdet's SGD 0.01.
# Which AdamW: LaViT's Swin-T (41.5) and Swin-S (44.5) rows, and L2ViT's
# Swin-S row (44.5, the same six numbers), are the PVTv2 paper's Swin
# RetinaNet rows, trained in PVT's RetinaNet recipe: AdamW lr 1e-4, weight
# decay 1e-4, batch 16, 12 epochs [8, 11], single scale 1333x800 (as mmdet's
# pvt/retinanet_pvt-*_fpn_1x_coco.py). L2ViT's Swin-T row alone (42.0) is
# +0.5 from another run (L2ViT's own RetinaNet recipe is AdamW 1e-4, wd
# 0.05, multi-scale crop); both metafiles pair this config, and the PVT
# recipe is the one behind three of the four Swin rows.
_base_ = ['mmdet::swin/retinanet_swin-t-p4-w7_fpn_1x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
custom_hooks = [dict(type='CheckpointCheckHook')]

_PVT_RETINA = ('openmmlab: mmdet::pvt/retinanet_pvt-s_fpn_1x_coco.py (PVT\'s '
               'RetinaNet recipe, behind the PVTv2 paper\'s Swin rows that '
               'LaViT Table 3 / L2ViT Table 4 quote)')

optim_wrapper = dict(
    optimizer=dict(
        _delete_=True, type='AdamW', lr=0.0001, weight_decay=0.0001))

recipe_sources = dict(
    optimizer='paper: LaViT Section 4.4 (AdamW, batch 16); ' + _PVT_RETINA,
    lr=_PVT_RETINA,
    weight_decay=_PVT_RETINA,
    batch='paper: LaViT Section 4.4 (batch 16 on 8 GPUs)',
    drop_path='openmmlab: mmdet::swin/retinanet_swin-t-p4-w7_fpn_1x_coco.py '
    '(0.2, Swin-T\'s detection value; the quoted rows do not say)',
    augmentation=_PVT_RETINA + ' (single scale 1333x800)',
    pretrained='official: Swin-Transformer release v1.0.0 '
    'swin_tiny_patch4_window7_224.pth (direct URL)')
