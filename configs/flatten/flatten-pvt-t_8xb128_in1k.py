# ImageNet-1k, the official FLatten-PVT recipe: 300 epochs, batch 1024,
# AdamW lr 1e-3 wd 0.05, cosine after 5 warm-up epochs, DeiT augmentation.
_base_ = ['mmpretrain::swin_transformer/swin-tiny_16xb64_in1k.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
custom_hooks = [dict(type='CheckpointCheckHook')]

model = dict(
    backbone=dict(
        _delete_=True,
        type='FLattenPVT',
        arch='tiny',
        drop_path_rate=0.1,
        out_indices=(3, ),
        # The official classifier pools the last stage without a norm.
        out_norm=False),
    head=dict(in_channels=512))

train_dataloader = dict(batch_size=128)
optim_wrapper = dict(
    clip_grad=None,
    paramwise_cfg=dict(
        custom_keys={
            '.pos_embed': dict(decay_mult=0.),
            '.positional_encoding': dict(decay_mult=0.),
            'attn.scale': dict(decay_mult=0.)
        }))
param_scheduler = [
    dict(
        type='LinearLR',
        start_factor=1e-3,
        by_epoch=True,
        end=5,
        convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=5)
]

_FL = 'official: FLatten-Transformer/'
recipe_sources = dict(
    optimizer='paper: FLatten Section 5.1 (AdamW, lr 1e-3 at batch 1024, '
    'wd 0.05, 300 epochs cosine)',
    batch=_FL + 'cfgs/flatten_pvt_t.yaml (8x128)',
    warmup=_FL + 'cfgs/flatten_pvt_t.yaml (WARMUP_EPOCHS 5)',
    drop_path=_FL + 'cfgs/flatten_pvt_t.yaml (0.1)',
    clip_grad=_FL + 'cfgs/flatten_pvt_t.yaml (CLIP_GRAD None)',
    augmentation='paper: FLatten Section 5.1 (DeiT augmentation)')
