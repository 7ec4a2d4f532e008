# Mask R-CNN FLatten-Swin-T 3x: FLatten Table 2 (46.5 / 42.1), in the paired
# Swin-T 3x row's recipe (the Swin release's multi-scale crop 3x: AdamW 1e-4,
# wd 0.05, batch 16, 36 epochs [27, 33], 500 warm-up iterations, fp16, drop
# path 0.2), the backbone swapped.
_base_ = ['../baselines/mask-rcnn_swin-t-p4-w7_fpn_ms-crop-3x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

_SWIN_3X = ('official: Swin-Transformer-Object-Detection/configs/swin/'
            'mask_rcnn_swin_tiny_patch4_window7_mstrain_480-800_adamw_3x_'
            'coco.py')

model = dict(
    backbone=dict(
        _delete_=True,
        type='FLattenSwinTransformer',
        arch='tiny',
        drop_path_rate=0.2,
        out_indices=(0, 1, 2, 3),
        # Official flatten_swin_t.pth ({'model': ...}, official key names,
        # converted by init_cfg on load): release page
        # https://github.com/LeapLabTHU/FLatten-Transformer (README,
        # FLatten-Swin-T 224, TsinghuaCloud
        # https://cloud.tsinghua.edu.cn/f/e1518e76703e4e57a7f2/?dl=1).
        init_cfg=dict(
            type='Pretrained', checkpoint='pretrain/flatten_swin_t.pth')))

# The base's groups plus no weight decay on positional encodings or the
# focusing scales.
optim_wrapper = dict(
    paramwise_cfg=dict(
        custom_keys={
            'positional_encoding': dict(decay_mult=0.),
            'attn.scale': dict(decay_mult=0.)
        }))

recipe_sources = dict(
    optimizer=_SWIN_3X + ' (the baseline row\'s recipe; FLatten released no '
    'detection code)',
    lr=_SWIN_3X,
    weight_decay=_SWIN_3X + ' (ours: also none on positional encodings and '
    'focusing scales)',
    batch=_SWIN_3X,
    schedule=_SWIN_3X,
    warmup=_SWIN_3X + ' (500 iterations)',
    drop_path=_SWIN_3X + ' (0.2, also FLatten-Swin-T\'s ImageNet value)',
    clip_grad=_SWIN_3X,
    augmentation='paper: FLatten Table 2 (Swin release multi-scale 480-800 '
    '+ crop 3x)',
    amp=_SWIN_3X + ' (fp16)',
    pretrained='official: FLatten-Transformer README, flatten_swin_t.pth '
    '(TsinghuaCloud, converted by init_cfg)')
