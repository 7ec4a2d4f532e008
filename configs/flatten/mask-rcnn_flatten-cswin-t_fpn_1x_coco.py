_base_ = ['./mask-rcnn_flatten-swin-t_fpn_1x_coco.py']

# FLatten-CSwin-T in mmdet's Swin-T Mask R-CNN 1x recipe (AdamW 1e-4, wd
# 0.05, batch 16, 12 epochs, single scale 1333x800) with the FLatten-Swin-T
# config's parameter groups. Neither the FLatten nor the CSwin repository
# released detection code; drop path 0.2 as FLatten-Swin-T (and Swin-T).
model = dict(
    backbone=dict(
        _delete_=True,
        type='FLattenCSwinTransformer',
        arch='tiny',
        drop_path_rate=0.2,
        out_indices=(0, 1, 2, 3),
        # Official flatten_cswin_t.pth ({'model', 'state_dict_ema'},
        # official key names; add state_dict_key='state_dict_ema' for the
        # EMA weights).
        init_cfg=dict(
            type='Pretrained', checkpoint='pretrain/flatten_cswin_t.pth')),
    neck=dict(in_channels=[64, 128, 256, 512]))
