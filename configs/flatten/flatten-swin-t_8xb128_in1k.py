# ImageNet-1k, the paper's recipe (as Swin's): 300 epochs, batch 1024,
# AdamW lr 1e-3 wd 0.05, cosine after 20 warm-up epochs, DeiT augmentation.
_base_ = ['mmpretrain::swin_transformer/swin-tiny_16xb64_in1k.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='FLattenSwinTransformer',
        arch='tiny',
        drop_path_rate=0.2,
        out_indices=(3, ),
        # As the official model: a 7x7 map is one unshifted window.
        pad_small_map=False),
    head=dict(in_channels=768))

train_dataloader = dict(batch_size=128)
# No weight decay on positional encodings and focusing scales either.
optim_wrapper = dict(
    paramwise_cfg=dict(
        custom_keys={
            '.positional_encoding': dict(decay_mult=0.),
            'attn.scale': dict(decay_mult=0.)
        }))
