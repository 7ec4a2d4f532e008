# RetinaNet Swin-S 1x (mmdet ships only Swin-T; Swin's own recipe for S:
# depths 2-2-18-2, drop path 0.3): the LaViT table's "Swin-S 60M / 335G" row.
_base_ = ['mmdet::swin/retinanet_swin-t-p4-w7_fpn_1x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        depths=[2, 2, 18, 2],
        drop_path_rate=0.3,
        init_cfg=dict(
            type='Pretrained',
            checkpoint='https://github.com/SwinTransformer/storage/releases/'
            'download/v1.0.0/swin_small_patch4_window7_224.pth')))
