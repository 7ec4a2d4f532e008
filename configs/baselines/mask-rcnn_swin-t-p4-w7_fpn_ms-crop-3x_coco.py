# mmdet's own Mask R-CNN Swin-T 3x (multi-scale crop): the FLatten table's
# "Swin-T 267G / 48M 3x" row.
_base_ = ['mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_ms-crop-3x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
