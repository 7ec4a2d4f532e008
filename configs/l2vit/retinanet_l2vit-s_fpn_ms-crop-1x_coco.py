# RetinaNet L2ViT-S, 1x (paper Table 4); the recipe of the L2ViT-T config
# with stochastic depth 0.1 (official retinanet_1x_l2vit_v0_small_coco.py).
_base_ = ['./retinanet_l2vit-t_fpn_ms-crop-1x_coco.py']

model = dict(
    backbone=dict(
        arch='small',
        drop_path_rate=0.1,
        # The official L2ViT-S ImageNet-1k release file ('model' entry),
        # loaded as it is; conversion (optional):
        #   python tools/model_converters/l2vit2vitattn.py \
        #       L2ViT-Small-checkpoint-best-ema.pth pretrain/l2vit-s_vitattn.pth
        init_cfg=dict(
            checkpoint='https://github.com/ChuanyangZheng/L2ViT/releases/download/v1.0/L2ViT-Small-checkpoint-best-ema.pth'  # noqa: E501
        )))

recipe_sources = dict(
    drop_path='official: L2ViT/object_detection/configs/L2ViT/'
    'retinanet_1x_l2vit_v0_small_coco.py (0.1)',
    pretrained='official: L2ViT/readme.md (release v1.0 '
    "L2ViT-Small-checkpoint-best-ema.pth; its 'model' entry, as "
    'object_detection/mmcv_custom/checkpoint.py loads it)')
