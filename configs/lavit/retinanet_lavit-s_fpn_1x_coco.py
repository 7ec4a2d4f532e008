# RetinaNet LaViT-S 1x, COCO (paper Table 3).
_base_ = ['./retinanet_lavit-t_fpn_1x_coco.py']

model = dict(
    backbone=dict(
        arch='small',
        # ImageNet-1k weights from configs/lavit/lavit-s_4xb256_in1k.py.
        init_cfg=dict(checkpoint='pretrain/lavit_s_in1k.pth')))

recipe_sources = dict(
    pretrained='ours: ImageNet-1k weights trained with '
    'configs/lavit/lavit-s_4xb256_in1k.py (no official LaViT weights exist)')
