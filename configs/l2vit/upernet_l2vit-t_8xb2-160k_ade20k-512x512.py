# UperNet L2ViT-T, ADE20K 160k (paper Table 5), as the official recipe (that
# of mmseg's Swin): AdamW lr 6e-5 wd 0.01, 1500-iteration warm-up then poly,
# batch 8x2, stochastic depth 0.3.
_base_ = [
    'mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'  # noqa: E501
]
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='L2ViT',
        arch='tiny',
        drop_path_rate=0.3,
        out_indices=(0, 1, 2, 3),
        # Official L2ViT-Tiny-checkpoint-best-ema.pth ({'model': ...,
        # 'model_ema': ...}, official key names).
        init_cfg=dict(
            type='Pretrained',
            checkpoint='pretrain/L2ViT-Tiny-checkpoint-best-ema.pth')),
    decode_head=dict(in_channels=[96, 192, 384, 768], num_classes=150),
    auxiliary_head=dict(in_channels=384, num_classes=150))

# No weight decay on norms (every LayerNorm / BatchNorm of L2ViT has 'norm'
# in its name) or on the linear attention's temperatures.
optim_wrapper = dict(
    paramwise_cfg=dict(
        _delete_=True,
        custom_keys={
            'norm': dict(decay_mult=0.),
            'temperature': dict(decay_mult=0.)
        }))
