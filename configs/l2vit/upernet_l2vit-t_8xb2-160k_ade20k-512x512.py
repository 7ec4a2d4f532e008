# UperNet L2ViT-T, ADE20K 160k (paper Table 5), as the official recipe (that
# of mmseg's Swin, but weight decay on every parameter): AdamW lr 6e-5 wd
# 0.01, 1500-iteration warm-up then poly, batch 8x2, stochastic depth 0.3.
_base_ = [
    'mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'  # noqa: E501
]
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
custom_hooks = [dict(type='CheckpointCheckHook')]

model = dict(
    backbone=dict(
        _delete_=True,
        type='L2ViT',
        arch='tiny',
        drop_path_rate=0.3,
        out_indices=(0, 1, 2, 3),
        # The official release's L2ViT-T ImageNet-1k file, loaded as it is
        # ('model' entry, as the official backbone's mmcv_custom
        # load_checkpoint takes it); see
        # configs/l2vit/mask-rcnn_l2vit-t_fpn_ms-crop-1x_coco.py for the EMA
        # weights, offline use and the optional conversion:
        #   python tools/model_converters/l2vit2vitattn.py \
        #       L2ViT-Tiny-checkpoint-best-ema.pth pretrain/l2vit-t_vitattn.pth
        init_cfg=dict(
            type='Pretrained',
            checkpoint='https://github.com/ChuanyangZheng/L2ViT/releases/download/v1.0/L2ViT-Tiny-checkpoint-best-ema.pth'  # noqa: E501
        )),
    decode_head=dict(in_channels=[96, 192, 384, 768], num_classes=150),
    auxiliary_head=dict(in_channels=384, num_classes=150))

# AdamW lr 6e-5 wd 0.01 on every parameter: the official configs leave
# mmseg Swin's paramwise_cfg (no decay on norms) commented out, so norms and
# temperatures decay too; fp32, no clipping.
optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(
        type='AdamW', lr=0.00006, betas=(0.9, 0.999), weight_decay=0.01))

_OFFICIAL = ('official: L2ViT/semantic_segmentation/configs/novel/'
             'upernet_l2vit_*_512x512_160k_ade20k.py')
recipe_sources = dict(
    optimizer=_OFFICIAL,
    lr=_OFFICIAL,
    weight_decay=_OFFICIAL + ' (0.01; norm paramwise_cfg commented out: '
    'every parameter decays)',
    batch=_OFFICIAL + ' (samples_per_gpu 2, "8 GPUs"; paper Sec. 5.3: 16)',
    schedule='paper: L2ViT Sec. 5.3 (160k iterations, as Swin); poly 1.0 '
    'from the official lr_config',
    warmup=_OFFICIAL + ' (1500 iterations linear from 1e-6)',
    drop_path=_OFFICIAL + ' (0.3 for all sizes)',
    clip_grad=_OFFICIAL + ' (none)',
    ema=_OFFICIAL + ' (none)',
    augmentation='openmmlab: mmseg::swin/swin-tiny-patch4-window7-in1k-pre_'
    'upernet_8xb2-160k_ade20k-512x512.py (the official configs take '
    "mmseg's ade20k.py: resize x0.5-2.0, crop 512, flip, photometric; paper "
    'Sec. 5.3: multi-scale training)',
    amp=_OFFICIAL + ' (fp32; no fp16 setting)',
    pretrained='official: L2ViT/readme.md (release v1.0 '
    "L2ViT-Tiny-checkpoint-best-ema.pth; its 'model' entry, as the official "
    'mmcv_custom load_checkpoint takes it)')
