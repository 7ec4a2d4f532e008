# mmdet's RetinaNet R101 1x: the LaViT table's "ResNet101 58M / 315G" row.
_base_ = ['mmdet::retinanet/retinanet_r101_fpn_1x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
