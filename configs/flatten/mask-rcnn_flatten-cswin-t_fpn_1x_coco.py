# Mask R-CNN FLatten-CSwin-T 1x (no paper row). Neither the FLatten nor the
# CSwin repository released detection code: FLatten-CSwin-T in the
# FLatten-Swin-T 1x config, i.e. the Swin release's Mask R-CNN 1x protocol
# (multi-scale 480-800 + crop, AdamW 1e-4, wd 0.05, batch 16, 12 epochs,
# 500 warm-up iterations, fp16) with the FLatten-Swin-T parameter groups.
_base_ = ['./mask-rcnn_flatten-swin-t_fpn_1x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

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
    optimizer='ours: the FLatten-Swin-T 1x recipe, the Swin release 1x (no '
    'FLatten-CSwin detection recipe exists)',
    drop_path='ours: FLatten-CSwin-T ImageNet value 0.2 (official '
    'cfgs/flatten_cswin_t.yaml); no detection value published',
    pretrained='official: FLatten-Transformer README, flatten_cswin_t.pth, '
    "its 'state_dict_ema' (as CSwin's segmentation loader)")
