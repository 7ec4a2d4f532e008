# L2ViT-T on ImageNet-1k (paper Table 2), the official recipe (paper Table 9,
# ChuanyangZheng/L2ViT classification/main.py, which is ConvNeXt's): 300
# epochs at batch 4096 (official: 8 GPUs x 128 x 4 accumulation steps),
# AdamW lr 4e-3 wd 0.05, 20 linear warm-up epochs, then cosine to 1e-6, both
# per iteration; RandAugment (9, 0.5), Mixup 0.8 / CutMix 1.0, label
# smoothing 0.1, random erasing 0.25, EMA 0.9999, no clipping, fp32,
# truncated-normal init; stochastic depth 0.1.
_base_ = ['mmpretrain::convnext/convnext-tiny_32xb128_in1k.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
custom_hooks = [
    # The base's EMA: momentum 1e-4 = decay 0.9999 per step of batch 4096,
    # as the official (timm) ModelEma updates once per accumulated step; it
    # averages the BatchNorm statistics too (update_buffers=True), as
    # ModelEma averages the whole state dict.
    dict(
        type='EMAHook',
        momentum=1e-4,
        update_buffers=True,
        priority='ABOVE_NORMAL'),
    dict(type='CheckpointCheckHook')
]

model = dict(
    backbone=dict(
        _delete_=True,
        type='L2ViT',
        arch='tiny',
        drop_path_rate=0.1,  # paper Table 9: 0.1 / 0.3 / 0.4 for T / S / B
        out_indices=(3, )),
    # The official classifier: final LayerNorm (norm3), average pooling.
    neck=dict(type='GlobalAveragePooling'),
    head=dict(in_channels=768))

# Weight decay as the official optim_factory.get_parameter_groups: none on
# 1-d parameters (norms, biases) and biases; every other tensor decays,
# the linear attention's (heads, 1, 1) temperatures included (the official
# model has no no_weight_decay() list).
optim_wrapper = dict(
    paramwise_cfg=dict(
        _delete_=True,
        norm_decay_mult=0.,
        bias_decay_mult=0.,
        flat_decay_mult=0.))

# Official utils.cosine_scheduler: linear warm-up from warmup_lr 0 over 20
# epochs, then cosine to min_lr 1e-6, both updated every iteration (paper
# Table 9: "by step"). mmengine's chained LinearLR cannot start at 0: it
# starts at 1e-3 x lr (4e-6).
param_scheduler = [
    dict(
        type='LinearLR',
        start_factor=1e-3,
        by_epoch=True,
        end=20,
        convert_to_iter_based=True),
    dict(
        type='CosineAnnealingLR',
        eta_min=1e-6,
        by_epoch=True,
        begin=20,
        end=300,
        convert_to_iter_based=True)
]

_TABLE9 = 'paper: L2ViT Table 9 (ImageNet-1K training settings)'
_MAIN = 'official: L2ViT/classification/main.py'
recipe_sources = dict(
    optimizer=_TABLE9 + ' (AdamW)',
    lr=_TABLE9 + ' (4e-3 at batch 4096)',
    weight_decay=_TABLE9 + ' (0.05; none on 1-d tensors and biases, '
    'temperatures decay: official optim_factory.py)',
    batch=_TABLE9 + ' (4096; official 8 GPUs x 128 x update_freq 4)',
    schedule=_MAIN + ' (300 epochs, cosine by step to min_lr 1e-6; paper '
    'Table 9)',
    warmup=_TABLE9 + ' (20 epochs linear; from 1e-3 x lr, ours: mmengine '
    "LinearLR can't start at 0)",
    drop_path=_TABLE9 + ' (0.1 / 0.3 / 0.4 for T / S / B)',
    clip_grad=_TABLE9 + ' (gradient clip None)',
    ema=_TABLE9 + ' (EMA 0.9999; BatchNorm statistics averaged too, as '
    'the official timm ModelEma)',
    augmentation=_TABLE9 + ' (RandAugment (9, 0.5), mixup 0.8, cutmix 1.0, '
    'erasing 0.25, label smoothing 0.1)',
    amp=_MAIN + ' (README training command: --use_amp=false)',
    pretrained='paper: L2ViT Table 2 (trained from scratch)')
