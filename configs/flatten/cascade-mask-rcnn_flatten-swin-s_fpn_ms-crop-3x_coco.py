_base_ = ['./cascade-mask-rcnn_flatten-swin-t_fpn_ms-crop-3x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        arch='small',
        # Official flatten_swin_s.pth ({'model': ...}, official key names).
        init_cfg=dict(
            type='Pretrained', checkpoint='pretrain/flatten_swin_s.pth')))
