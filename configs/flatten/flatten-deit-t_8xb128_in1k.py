# ImageNet-1k, the DeiT recipe (mmpretrain's deit-tiny): 300 epochs, batch
# 1024, AdamW lr 1e-3 wd 0.05, cosine after 20 warm-up epochs, DeiT
# augmentation (RandAugment, random erasing, mixup 0.8 / cutmix 1.0, label
# smoothing 0.1), gradient clipping 5. Drop path 0.1: DeiT's own value and
# the FLatten training code's default (mmpretrain's tiny recipe drops it).
# The FLatten repository released no FLatten-DeiT code or weights.
_base_ = ['mmpretrain::deit/deit-tiny_4xb256_in1k.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
custom_hooks = [dict(type='CheckpointCheckHook')]

model = dict(
    backbone=dict(
        _delete_=True,
        type='FLattenDeiT',
        arch='tiny',
        drop_path_rate=0.1,
        # No class token: the mean token through the last block's norm.
        out_type='avg_featmap'),
    head=dict(in_channels=192))

train_dataloader = dict(batch_size=128)
# No weight decay on norms, biases, the position embedding, positional
# encodings or the focusing scales (there is no class token).
optim_wrapper = dict(
    paramwise_cfg=dict(
        custom_keys={
            '_delete_': True,
            '.pos_embed': dict(decay_mult=0.),
            '.positional_encoding': dict(decay_mult=0.),
            'attn.scale': dict(decay_mult=0.)
        }))

recipe_sources = dict(
    drop_path="paper: DeiT (0.1; also the FLatten training code's default "
    'MODEL.DROP_PATH_RATE; no FLatten-DeiT code was released)')
