# MSF-Swin-S with the 2-group interleaved q/k/v/p projection.
_base_ = ['./upernet_msf-swin-s_8xb2-160k_ade20k-512x512.py']

model = dict(
    backbone=dict(
        groups=2,
        # ImageNet-1k weights of msf-swin-s-g2_4xb256-300e_in1k.py.
        init_cfg=dict(checkpoint='pretrain/msf-swin-s-g2_in1k.pth')))

recipe_sources = dict(
    pretrained='ours: pretrain/msf-swin-s-g2_in1k.pth, trained with '
    'configs/msf/msf-swin-s-g2_4xb256-300e_in1k.py (MSF released no weights)')
