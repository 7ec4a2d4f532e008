# mmdet's own Mask R-CNN Swin-T 1x: the FLOP counter's reference point
# (267.0 G / 47.79 M at 800x1280) and the FLatten/L2ViT baseline row.
_base_ = ['mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
