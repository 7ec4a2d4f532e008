# ImageNet-1k, the paper's recipe (as Swin's): 300 epochs, batch 1024,
# AdamW lr 1e-3 wd 0.05, cosine after 20 warm-up epochs, DeiT augmentation.
_base_ = ['mmpretrain::swin_transformer/swin-tiny_16xb64_in1k.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
custom_hooks = [dict(type='CheckpointCheckHook')]

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

_FL = 'official: FLatten-Transformer/'
recipe_sources = dict(
    optimizer='paper: FLatten Section 5.1 (AdamW, lr 1e-3 at batch 1024, '
    'wd 0.05, 300 epochs cosine, 20 warm-up epochs)',
    drop_path=_FL + 'cfgs/flatten_swin_t.yaml (0.2)',
    clip_grad=_FL + 'config.py (CLIP_GRAD 5.0 default)',
    augmentation='paper: FLatten Section 5.1 (DeiT augmentation)')
