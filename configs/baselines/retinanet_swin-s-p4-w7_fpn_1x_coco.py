# RetinaNet Swin-S 1x: the LaViT Table 3 / L2ViT Table 4 "Swin-S 60M / 335G"
# row (44.5 in both, the PVTv2 paper's Swin-S RetinaNet row), in PVT's
# RetinaNet recipe as the Swin-T baseline (see it): AdamW lr 1e-4, weight
# decay 1e-4, batch 16, 1x, single scale. mmdet ships only Swin-T:
# depths 2-2-18-2; drop path 0.2, Swin-S's value in every detection config
# of the Swin release (mask_rcnn / cascade_mask_rcnn_swin_small_..., 0.3 is
# its segmentation value).
_base_ = ['./retinanet_swin-t-p4-w7_fpn_1x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

_PVT_RETINA = ('openmmlab: mmdet::pvt/retinanet_pvt-s_fpn_1x_coco.py (PVT\'s '
               'RetinaNet recipe, behind the PVTv2 paper\'s Swin-S row that '
               'LaViT Table 3 / L2ViT Table 4 quote)')

model = dict(
    backbone=dict(
        depths=[2, 2, 18, 2],
        drop_path_rate=0.2,
        init_cfg=dict(
            type='Pretrained',
            checkpoint='https://github.com/SwinTransformer/storage/releases/'
            'download/v1.0.0/swin_small_patch4_window7_224.pth')))

recipe_sources = dict(
    optimizer='paper: LaViT Section 4.4 (AdamW, batch 16); ' + _PVT_RETINA,
    lr=_PVT_RETINA,
    weight_decay=_PVT_RETINA,
    batch='paper: LaViT Section 4.4 (batch 16 on 8 GPUs)',
    drop_path='official: Swin-Transformer-Object-Detection/configs/swin/'
    'mask_rcnn_swin_small_patch4_window7_mstrain_480-800_adamw_3x_coco.py '
    '(0.2 for Swin-S detection; the quoted row does not say)',
    augmentation=_PVT_RETINA + ' (single scale 1333x800)',
    pretrained='official: Swin-Transformer release v1.0.0 '
    'swin_small_patch4_window7_224.pth (direct URL)')
