# Cascade Mask R-CNN FLatten-Swin-T 3x: FLatten Table 2 (50.8 / 44.1), in
# the paired Swin-T row's recipe (the baseline config: the Swin release's
# Cascade 3x), the backbone swapped.
_base_ = ['../baselines/cascade-mask-rcnn_swin-t-p4-w7_fpn_ms-crop-3x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

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

# The Swin recipe of the baseline; no weight decay on norms, bias tables,
# positional encodings or the focusing scales.
optim_wrapper = dict(
    paramwise_cfg=dict(
        custom_keys={
            'positional_encoding': dict(decay_mult=0.),
            'attn.scale': dict(decay_mult=0.)
        }))

_CASCADE_3X = ('official: Swin-Transformer-Object-Detection/configs/swin/'
               'cascade_mask_rcnn_swin_tiny_patch4_window7_mstrain_480-800_'
               'giou_4conv1f_adamw_3x_coco.py')
recipe_sources = dict(
    optimizer=_CASCADE_3X + " (the baseline row's recipe)",
    lr=_CASCADE_3X,
    weight_decay=_CASCADE_3X + ' (ours: also none on positional encodings '
    'and focusing scales)',
    batch=_CASCADE_3X,
    schedule=_CASCADE_3X,
    warmup=_CASCADE_3X + ' (500 iterations)',
    drop_path=_CASCADE_3X + " (0.2, also FLatten-Swin-T's ImageNet value)",
    clip_grad=_CASCADE_3X,
    augmentation='paper: FLatten Table 2 (Swin release multi-scale 480-800 '
    '+ crop 3x)',
    amp=_CASCADE_3X + ' (fp16)',
    pretrained='official: FLatten-Transformer README, flatten_swin_t.pth '
    '(TsinghuaCloud, converted by init_cfg)')
