# Mask R-CNN FLatten-Swin-T 1x: FLatten Table 2 (44.2 / 40.2). FLatten
# released no detection code; the paper trains every model with its
# baseline's settings, and the paired Swin-T 1x row (43.7 / 39.8) is the
# Swin release's multi-scale 480-800 + crop 1x protocol, so this config takes
# the baseline config's recipe as is (multi-scale crop pipeline, AdamW 1e-4,
# wd 0.05, batch 16, 12 epochs [8, 11], 500 warm-up iterations, fp16, drop
# path 0.1) with the backbone swapped.
_base_ = ['../baselines/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

_SWIN_1X = ('official: Swin-Transformer-Object-Detection/configs/swin/'
            'mask_rcnn_swin_tiny_patch4_window7_mstrain_480-800_adamw_1x_'
            'coco.py')

model = dict(
    backbone=dict(
        _delete_=True,
        type='FLattenSwinTransformer',
        arch='tiny',
        # The baseline's official 1x value (FLatten's ImageNet value is 0.2).
        drop_path_rate=0.1,
        out_indices=(0, 1, 2, 3),
        # Official FLatten-Swin-T ImageNet weights ({'model': ...}, official
        # key names; init_cfg converts them on load, no converter needed):
        # release page https://github.com/LeapLabTHU/FLatten-Transformer
        # (README "Pretrained Models", FLatten-Swin-T 224, TsinghuaCloud
        # https://cloud.tsinghua.edu.cn/f/e1518e76703e4e57a7f2/?dl=1), saved
        # as pretrain/flatten_swin_t.pth. For load_from / tools/test.py use
        # tools/model_converters/flatten2vitattn.py flatten_swin_t.pth
        # pretrain/flatten_swin_t_vitattn.pth.
        init_cfg=dict(
            type='Pretrained', checkpoint='pretrain/flatten_swin_t.pth')))

# The base's groups (no weight decay on norms, bias tables) plus none on the
# positional encodings or the focusing scales.
optim_wrapper = dict(
    paramwise_cfg=dict(
        custom_keys={
            'positional_encoding': dict(decay_mult=0.),
            'attn.scale': dict(decay_mult=0.)
        }))

recipe_sources = dict(
    optimizer=_SWIN_1X + ' (the baseline row\'s recipe; FLatten released no '
    'detection code)',
    lr=_SWIN_1X,
    weight_decay=_SWIN_1X + ' (ours: also none on positional encodings and '
    'focusing scales)',
    batch=_SWIN_1X + ' (2 images x 8 GPUs)',
    schedule=_SWIN_1X + ' (12 epochs, steps 8 / 11)',
    warmup=_SWIN_1X + ' (500 iterations)',
    drop_path=_SWIN_1X + ' (0.1; FLatten gives no detection value)',
    clip_grad=_SWIN_1X + ' (grad_clip None)',
    augmentation='paper: FLatten Table 2 (the Swin-T 43.7/39.8 row is '
    "Swin's multi-scale 480-800 + crop 1x)",
    amp=_SWIN_1X + ' (fp16; FLatten attention is fp16-safe since the '
    'official 2024-05 fix, which our module follows)',
    pretrained='official: FLatten-Transformer README, flatten_swin_t.pth '
    '(TsinghuaCloud, loaded and converted by init_cfg)')
