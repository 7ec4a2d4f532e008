# Softmax baseline of mask-rcnn_msf-swin-t: the same backbone with Swin's
# window attention (the layout, parameters and FLOPs of mmdet's own Swin-T)
# and the same recipe (the Swin release's multi-scale + crop 1x).
_base_ = ['./mask-rcnn_msf-swin-t_fpn_1x_coco.py']

model = dict(
    backbone=dict(
        mean_shift=False,
        # ImageNet-1k weights trained with swin-t-softmax_4xb256-300e_in1k.py
        # (the MSF protocol's "Orig." Swin-T, paper Table 6; no release).
        init_cfg=dict(checkpoint='pretrain/swin-t-softmax_in1k.pth')))

recipe_sources = dict(
    pretrained='ours: pretrain/swin-t-softmax_in1k.pth, trained with '
    'configs/msf/swin-t-softmax_4xb256-300e_in1k.py, so the pair differs in '
    'the attention only (MSF released no weights)')
