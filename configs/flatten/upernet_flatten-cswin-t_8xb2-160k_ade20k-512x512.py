_base_ = ['./upernet_flatten-swin-t_8xb2-160k_ade20k-512x512.py']

# FLatten-CSwin-T in mmseg's Swin-T UperNet recipe (AdamW 6e-5, wd 0.01,
# poly, 1500 warm-up iterations, batch 16, 160k iterations), which is also
# the official CSwin-T UperNet recipe, drop path 0.3 included; parameter
# groups as the FLatten-Swin-T config.
model = dict(
    backbone=dict(
        _delete_=True,
        type='FLattenCSwinTransformer',
        arch='tiny',
        drop_path_rate=0.3,
        out_indices=(0, 1, 2, 3),
        # Official flatten_cswin_t.pth ({'model', 'state_dict_ema'},
        # official key names; add state_dict_key='state_dict_ema' for the
        # EMA weights).
        init_cfg=dict(
            type='Pretrained', checkpoint='pretrain/flatten_cswin_t.pth')),
    decode_head=dict(in_channels=[64, 128, 256, 512]),
    auxiliary_head=dict(in_channels=256))

recipe_sources = dict(
    drop_path='official: CSWin-Transformer/segmentation/configs/cswin/'
    'upernet_cswin_tiny.py (0.3)',
    pretrained="official: FLatten-Transformer README, flatten_cswin_t.pth (TsinghuaCloud https://cloud.tsinghua.edu.cn/f/48ba765ba8b0451d9d5a/?dl=1, loaded and converted by init_cfg); its 'state_dict_ema', as CSwin's own segmentation loader")
