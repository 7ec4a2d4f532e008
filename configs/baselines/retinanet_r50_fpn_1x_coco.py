# mmdet's RetinaNet R50 1x: the LaViT table's "ResNet50 38M / 239G" row.
_base_ = ['mmdet::retinanet/retinanet_r50_fpn_1x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
