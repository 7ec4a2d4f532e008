# mmdet's RetinaNet R101 1x: the LaViT table's "ResNet101 58M / 315G" row.
_base_ = ['mmdet::retinanet/retinanet_r101_fpn_1x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
custom_hooks = [dict(type='CheckpointCheckHook')]

# mmdet's SGD recipe (lr 0.01, batch 16, 1x): the row (38.5) is the PVT
# paper's ResNet101 RetinaNet row, an mmdet 1x SGD run.
recipe_sources = dict(
    optimizer='openmmlab: mmdet::retinanet/retinanet_r101_fpn_1x_coco.py '
    "(the PVT paper's ResNet rows, quoted by LaViT Table 3, are mmdet's SGD "
    '1x runs)')
