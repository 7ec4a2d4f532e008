# mmdet's RetinaNet PVT-S 1x: the LaViT table's "PVT-Small 34M / 226G" row.
_base_ = ['mmdet::pvt/retinanet_pvt-s_fpn_1x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
custom_hooks = [dict(type='CheckpointCheckHook')]

# mmdet's config is PVT's RetinaNet recipe (AdamW 1e-4, wd 1e-4, batch 16,
# 1x, single scale), as the row (the PVT paper's) was trained.
recipe_sources = dict(
    optimizer='paper: LaViT Section 4.4 (AdamW, batch 16); openmmlab: '
    "mmdet::pvt/retinanet_pvt-s_fpn_1x_coco.py (PVT's recipe; the row is "
    "the PVT paper's)",
    pretrained='official: whai362/PVT release v2 pvt_small.pth (direct URL)')
