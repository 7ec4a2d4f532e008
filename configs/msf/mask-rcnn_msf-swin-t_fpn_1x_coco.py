# mmdet's Mask R-CNN Swin-T 1x recipe (AdamW 1e-4, wd 0.05; no decay on
# norms and relative position bias tables) with MSF attention in every
# window.
_base_ = ['mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='MSFSwinTransformer',
        arch='tiny',
        drop_path_rate=0.2,
        out_indices=(0, 1, 2, 3),
        # ImageNet-1k weights of msf-swin-t_4xb256-300e_in1k.py (the paper
        # released no Swin weights).
        init_cfg=dict(type='Pretrained',
                      checkpoint='pretrain/msf-swin-t_in1k.pth')))
