# ImageNet-1k, the official FLatten-CSwin recipe (as CSwin's): 300 epochs,
# AdamW (official base lr 5e-4 per 512 images: 1e-3 at batch 1024),
# weight decay 0.05, cosine after 20 warm-up epochs, DeiT augmentation, no
# gradient clipping, drop path 0.2, EMA of the weights (the official decay
# rescaled to batch 1024, see custom_hooks).
_base_ = ['mmpretrain::swin_transformer/swin-tiny_16xb64_in1k.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
# EMA of the weights, updated every iteration (timm ModelEma in the official
# main_ema.py; mmengine's momentum = 1 - decay). The official decay is set
# for the official batch: FLatten README / cfgs/flatten_cswin_t.yaml run
# 8 GPUs x 256 = 2048 images per iteration with decay 0.99984, an averaging
# window of 2048 / (1 - 0.99984) = 2048 / 1.6e-4 = 12.8M images. At batch
# 1024 (8 x 128) the same window in images needs momentum
# 1024 / 12.8M = 8e-5 (= 1.6e-4 * 1024 / 2048; decay 0.99992, which is
# 0.99984 ** (1024 / 2048) to 1e-8).
custom_hooks = [
    dict(type='EMAHook', momentum=8e-5, priority='ABOVE_NORMAL'),
    dict(type='CheckpointCheckHook')
]

model = dict(
    backbone=dict(
        _delete_=True,
        type='FLattenCSwinTransformer',
        arch='t',
        drop_path_rate=0.2,
        out_indices=(3, )),
    head=dict(in_channels=512))

train_dataloader = dict(batch_size=128)
# No weight decay on positional encodings and focusing scales either.
optim_wrapper = dict(
    optimizer=dict(weight_decay=0.05),
    clip_grad=None,
    paramwise_cfg=dict(
        custom_keys={
            '.positional_encoding': dict(decay_mult=0.),
            'attn.scale': dict(decay_mult=0.)
        }))

_FL = 'official: FLatten-Transformer/'
recipe_sources = dict(
    optimizer='paper: FLatten Section 5.1 (AdamW, as the baseline models)',
    lr=_FL + 'main_ema.py (BASE_LR 5e-4 per 512 images, linear scaling: '
    '1e-3 at batch 1024)',
    weight_decay=_FL + 'cfgs/flatten_cswin_t.yaml (0.05)',
    batch='paper: FLatten Section 5.1 (lr given for batch 1024; official '
    'cfgs/flatten_cswin_t.yaml runs 8x256 with the lr scaled)',
    schedule='paper: FLatten Section 5.1 (300 epochs, cosine)',
    warmup='paper: FLatten Section 5.1 (20 epochs)',
    drop_path=_FL + 'cfgs/flatten_cswin_t.yaml (0.2)',
    clip_grad=_FL + 'cfgs/flatten_cswin_t.yaml (CLIP_GRAD None)',
    ema=_FL + 'README (--model-ema-decay 0.99984 at 8x256 images), '
    'rescaled to the same window in images at batch 1024: momentum 8e-5',
    augmentation='paper: FLatten Section 5.1 (DeiT: RandAugment, Mixup, '
    'CutMix, random erasing)')
