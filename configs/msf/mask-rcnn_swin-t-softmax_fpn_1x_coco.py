# Softmax baseline of mask-rcnn_msf-swin-t: the same backbone with Swin's
# window attention (the layout, parameters and FLOPs of mmdet's own Swin-T).
_base_ = ['./mask-rcnn_msf-swin-t_fpn_1x_coco.py']

model = dict(
    backbone=dict(
        mean_shift=False,
        # ImageNet-1k weights of swin-t-softmax_4xb256-300e_in1k.py.
        init_cfg=dict(checkpoint='pretrain/swin-t-softmax_in1k.pth')))
