# Mask R-CNN L2ViT-B, 3x (official config; no paper row): the 1x recipe for
# 36 epochs (steps at 27 and 33) with stochastic depth 0.3
# (official maskrcnn_3x_l2vit_v0_base_coco.py).
_base_ = ['./mask-rcnn_l2vit-b_fpn_ms-crop-1x_coco.py']

model = dict(backbone=dict(drop_path_rate=0.3))

max_epochs = 36
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    dict(
        type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=500),
    dict(
        type='MultiStepLR',
        begin=0,
        end=max_epochs,
        by_epoch=True,
        milestones=[27, 33],
        gamma=0.1)
]

recipe_sources = dict(
    schedule='official: L2ViT/object_detection/configs/L2ViT/'
    'maskrcnn_3x_l2vit_v0_base_coco.py (36 epochs, steps 27 / 33)',
    drop_path='official: L2ViT/object_detection/configs/L2ViT/'
    'maskrcnn_3x_l2vit_v0_base_coco.py (0.3)')
