# mmdet's RetinaNet Swin-T 1x: the LaViT / L2ViT tables' "Swin-T 39M / 245G"
# row.
_base_ = ['mmdet::swin/retinanet_swin-t-p4-w7_fpn_1x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
