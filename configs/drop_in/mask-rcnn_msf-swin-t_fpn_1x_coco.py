# mmdet's own Swin-T Mask R-CNN config with one change: the backbone type.
# MSFSwinTransformer takes mmdet's Swin keywords, so any mmdet / mmseg Swin
# config works this way. The inherited init_cfg points at the official
# Swin-T ImageNet file, whose qkv projections do not fit MSF's q/k/v/p
# projection: for the paper's setting use mask-rcnn_msf-swin-t_fpn_1x_coco.py.
_base_ = ['mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
# Refuse a load_from file that would leave the model mostly random, also
# with mmdet's own tools/train.py.
custom_hooks = [dict(type='CheckpointCheckHook')]

model = dict(backbone=dict(type='MSFSwinTransformer'))
