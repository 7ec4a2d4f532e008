_base_ = [
    'mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'  # noqa: E501
]
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
custom_hooks = [dict(type='CheckpointCheckHook')]

model = dict(
    backbone=dict(
        _delete_=True,
        type='FLattenSwinTransformer',
        arch='tiny',
        drop_path_rate=0.3,
        out_indices=(0, 1, 2, 3),
        # Official flatten_swin_t.pth ({'model': ...}, official key names).
        init_cfg=dict(
            type='Pretrained', checkpoint='pretrain/flatten_swin_t.pth')))

# mmseg's Swin recipe (AdamW 6e-5, wd 0.01, poly); no weight decay on
# norms, bias tables, positional encodings or the focusing scales.
optim_wrapper = dict(
    paramwise_cfg=dict(
        custom_keys={
            'positional_encoding': dict(decay_mult=0.),
            'attn.scale': dict(decay_mult=0.)
        }))

recipe_sources = dict(
    optimizer='openmmlab: mmseg::swin/swin-tiny-patch4-window7-in1k-pre_'
    "upernet_8xb2-160k_ade20k-512x512.py (the Swin release's UperNet recipe "
    "behind FLatten Table 1's Swin-T row; FLatten released no seg code)",
    pretrained='official: FLatten-Transformer README, flatten_swin_t.pth (TsinghuaCloud https://cloud.tsinghua.edu.cn/f/e1518e76703e4e57a7f2/?dl=1, loaded and converted by init_cfg)')
