# mmdet's RetinaNet PVT-S 1x: the LaViT table's "PVT-Small 34M / 226G" row.
_base_ = ['mmdet::pvt/retinanet_pvt-s_fpn_1x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
