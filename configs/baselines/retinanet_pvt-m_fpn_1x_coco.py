# mmdet's RetinaNet PVT-M 1x: the LaViT table's "PVT-M 54M / 283G" row.
_base_ = ['mmdet::pvt/retinanet_pvt-m_fpn_1x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
