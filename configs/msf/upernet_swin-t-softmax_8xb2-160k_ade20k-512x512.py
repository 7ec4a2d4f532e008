# Softmax baseline of upernet_msf-swin-t: the same backbone with Swin's
# window attention (the layout, parameters and FLOPs of mmseg's own Swin-T).
_base_ = ['./upernet_msf-swin-t_8xb2-160k_ade20k-512x512.py']

model = dict(
    backbone=dict(
        mean_shift=False,
        # ImageNet-1k weights of swin-t-softmax_4xb256-300e_in1k.py.
        init_cfg=dict(checkpoint='pretrain/swin-t-softmax_in1k.pth')))

recipe_sources = dict(
    pretrained='ours: pretrain/swin-t-softmax_in1k.pth, trained with '
    'configs/msf/swin-t-softmax_4xb256-300e_in1k.py (MSF released no weights)')
