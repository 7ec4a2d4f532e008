# mmdet's own Swin-T Mask R-CNN config with one change: the backbone type.
# FLattenSwinTransformer takes mmdet's Swin keywords (embed_dims, depths,
# num_heads, mlp_ratio, qk_scale, drop_rate, attn_drop_rate, patch_norm,
# convert_weights, ...), so any mmdet / mmseg Swin config works this way.
# The inherited init_cfg loads the official Swin-T ImageNet file: its Swin
# stages fill ours, the FLatten stages start from scratch. For the paper's
# numbers use mask-rcnn_flatten-swin-t_fpn_1x_coco.py (FLatten weights).
_base_ = ['mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
# Refuse a load_from file that would leave the model mostly random, also
# with mmdet's own tools/train.py.
custom_hooks = [dict(type='CheckpointCheckHook')]

model = dict(backbone=dict(type='FLattenSwinTransformer'))
