# Mask R-CNN FLatten-CSwin-T 1x (no paper row). Neither the FLatten nor the
# CSwin repository released detection code: FLatten-CSwin-T in the
# FLatten-Swin-T 1x config, i.e. the Swin release's Mask R-CNN 1x protocol
# (multi-scale 480-800 + crop, AdamW 1e-4, wd 0.05, batch 16, 12 epochs,
# 500 warm-up iterations, fp16) with the FLatten-Swin-T parameter groups.
_base_ = ['./mask-rcnn_flatten-swin-t_fpn_1x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
custom_hooks = [dict(type='CheckpointCheckHook')]

_SWIN_1X = ('official: Swin-Transformer-Object-Detection/configs/swin/'
            'mask_rcnn_swin_tiny_patch4_window7_mstrain_480-800_adamw_1x_'
            'coco.py')

model = dict(
    backbone=dict(
        _delete_=True,
        type='FLattenCSwinTransformer',
        arch='tiny',
        # FLatten-CSwin-T's ImageNet value (no detection value published).
        drop_path_rate=0.2,
        out_indices=(0, 1, 2, 3),
        # Official FLatten-CSwin-T ImageNet weights: release page
        # https://github.com/LeapLabTHU/FLatten-Transformer (README
        # "Pretrained Models", FLatten-CSwin-T 224, TsinghuaCloud
        # https://cloud.tsinghua.edu.cn/f/48ba765ba8b0451d9d5a/?dl=1), saved
        # as pretrain/flatten_cswin_t.pth. The file holds {'model',
        # 'state_dict_ema'}; CSwin's own downstream loader
        # (segmentation/mmcv_custom/checkpoint.py) takes 'state_dict_ema'
        # before 'model', so state_dict_key does the same. init_cfg
        # converts the official key names on load; for load_from use
        # tools/model_converters/flatten2vitattn.py flatten_cswin_t.pth
        # pretrain/flatten_cswin_t_vitattn.pth --key state_dict_ema.
        init_cfg=dict(
            type='Pretrained',
            checkpoint='pretrain/flatten_cswin_t.pth',
            state_dict_key='state_dict_ema')),
    neck=dict(in_channels=[64, 128, 256, 512]))

recipe_sources = dict(
    optimizer=_SWIN_1X + ' (ours: the FLatten-Swin-T 1x recipe; no '
    'FLatten-CSwin detection recipe exists)',
    lr=_SWIN_1X,
    weight_decay=_SWIN_1X,
    batch=_SWIN_1X,
    schedule=_SWIN_1X,
    warmup=_SWIN_1X,
    drop_path='ours: FLatten-CSwin-T ImageNet value 0.2 (official '
    'cfgs/flatten_cswin_t.yaml); no detection value published',
    clip_grad=_SWIN_1X,
    augmentation=_SWIN_1X + ' (multi-scale 480-800 + crop)',
    amp=_SWIN_1X + ' (fp16)',
    pretrained='official: FLatten-Transformer README, flatten_cswin_t.pth, '
    "its 'state_dict_ema' (as CSwin's segmentation loader)")
