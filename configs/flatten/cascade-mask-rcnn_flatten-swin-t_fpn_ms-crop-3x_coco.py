_base_ = ['../baselines/cascade-mask-rcnn_swin-t-p4-w7_fpn_ms-crop-3x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='FLattenSwinTransformer',
        arch='tiny',
        drop_path_rate=0.2,
        out_indices=(0, 1, 2, 3),
        # Official flatten_swin_t.pth ({'model': ...}, official key names).
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
