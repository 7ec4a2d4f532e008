# ImageNet-1k, the official FLatten-CSwin recipe (as CSwin's): 300 epochs,
# AdamW (official base lr 5e-4 per 512 images: 1e-3 at batch 1024),
# weight decay 0.1, cosine after 20 warm-up epochs, DeiT augmentation, no
# gradient clipping, drop path 0.5, EMA of the weights (decay 0.99982 per
# iteration, the official value).
_base_ = ['mmpretrain::swin_transformer/swin-tiny_16xb64_in1k.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='FLattenCSwinTransformer',
        arch='b',
        drop_path_rate=0.5,
        out_indices=(3, )),
    head=dict(in_channels=768))

train_dataloader = dict(batch_size=128)
# No weight decay on positional encodings and focusing scales either.
optim_wrapper = dict(
    optimizer=dict(weight_decay=0.1),
    clip_grad=None,
    paramwise_cfg=dict(
        custom_keys={
            '.positional_encoding': dict(decay_mult=0.),
            'attn.scale': dict(decay_mult=0.)
        }))
custom_hooks = [
    dict(type='EMAHook', momentum=1.8e-4, priority='ABOVE_NORMAL')
]
