# Cascade Mask R-CNN Swin-S 3x (the Swin release's cascade_mask_rcnn_swin_
# small_patch4_window7_mstrain_480-800_giou_4conv1f_adamw_3x_coco.py: the -T
# recipe, drop path 0.2 too): the FLatten Table 2 "Swin-S 838G / 107M" row.
_base_ = ['./cascade-mask-rcnn_swin-t-p4-w7_fpn_ms-crop-3x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

pretrained = 'https://github.com/SwinTransformer/storage/releases/download/v1.0.0/swin_small_patch4_window7_224.pth'  # noqa
model = dict(
    backbone=dict(
        depths=[2, 2, 18, 2],
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)))

_CASCADE_S_3X = ('official: Swin-Transformer-Object-Detection/configs/swin/'
                 'cascade_mask_rcnn_swin_small_patch4_window7_mstrain_480-'
                 '800_giou_4conv1f_adamw_3x_coco.py')
recipe_sources = dict(
    optimizer=_CASCADE_S_3X,
    lr=_CASCADE_S_3X,
    weight_decay=_CASCADE_S_3X,
    batch=_CASCADE_S_3X,
    schedule=_CASCADE_S_3X,
    warmup=_CASCADE_S_3X + ' (500 iterations)',
    drop_path=_CASCADE_S_3X + ' (0.2)',
    clip_grad=_CASCADE_S_3X,
    augmentation=_CASCADE_S_3X + ' (multi-scale 480-800 + crop)',
    amp=_CASCADE_S_3X + ' (fp16)',
    pretrained='official: Swin-Transformer release v1.0.0 '
    'swin_small_patch4_window7_224.pth (direct URL)')
