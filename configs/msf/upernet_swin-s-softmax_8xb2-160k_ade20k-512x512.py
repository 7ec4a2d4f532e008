# Softmax baseline of upernet_msf-swin-s: the same backbone with Swin's
# window attention (the layout, parameters and FLOPs of mmseg's own Swin-S).
_base_ = ['./upernet_msf-swin-s_8xb2-160k_ade20k-512x512.py']

model = dict(
    backbone=dict(
        mean_shift=False,
        # ImageNet-1k weights of swin-s-softmax_4xb256-300e_in1k.py.
        init_cfg=dict(checkpoint='pretrain/swin-s-softmax_in1k.pth')))

recipe_sources = dict(
    pretrained='ours: pretrain/swin-s-softmax_in1k.pth, trained with '
    'configs/msf/swin-s-softmax_4xb256-300e_in1k.py (MSF released no weights)')
