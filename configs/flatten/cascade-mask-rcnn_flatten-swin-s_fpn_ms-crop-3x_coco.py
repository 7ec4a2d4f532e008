# Cascade Mask R-CNN FLatten-Swin-S 3x: FLatten Table 2 (52.2 / 45.4), the
# FLatten-Swin-T recipe (the Swin release's Cascade 3x, drop path 0.2 as
# its Swin-S config) with FLatten-Swin-S.
_base_ = ['./cascade-mask-rcnn_flatten-swin-t_fpn_ms-crop-3x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        arch='small',
        # Official flatten_swin_s.pth ({'model': ...}, official key names,
        # converted by init_cfg on load): release page
        # https://github.com/LeapLabTHU/FLatten-Transformer (README,
        # FLatten-Swin-S 224, TsinghuaCloud
        # https://cloud.tsinghua.edu.cn/f/94188e52af354bf4a88b/?dl=1).
        init_cfg=dict(
            type='Pretrained', checkpoint='pretrain/flatten_swin_s.pth')))

_CASCADE_S_3X = ('official: Swin-Transformer-Object-Detection/configs/swin/'
                 'cascade_mask_rcnn_swin_small_patch4_window7_mstrain_480-'
                 '800_giou_4conv1f_adamw_3x_coco.py')
recipe_sources = dict(
    optimizer=_CASCADE_S_3X + " (the baseline row's recipe)",
    lr=_CASCADE_S_3X,
    weight_decay=_CASCADE_S_3X + ' (ours: also none on positional '
    'encodings and focusing scales)',
    batch=_CASCADE_S_3X,
    schedule=_CASCADE_S_3X,
    warmup=_CASCADE_S_3X + ' (500 iterations)',
    drop_path=_CASCADE_S_3X + ' (0.2)',
    clip_grad=_CASCADE_S_3X,
    augmentation='paper: FLatten Table 2 (Swin release multi-scale 480-800 '
    '+ crop 3x)',
    amp=_CASCADE_S_3X + ' (fp16)',
    pretrained='official: FLatten-Transformer README, flatten_swin_s.pth '
    '(TsinghuaCloud, converted by init_cfg)')
