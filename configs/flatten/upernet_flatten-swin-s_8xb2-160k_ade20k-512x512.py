_base_ = ['./upernet_flatten-swin-t_8xb2-160k_ade20k-512x512.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        arch='small',
        # Official flatten_swin_s.pth ({'model': ...}, official key names).
        init_cfg=dict(
            type='Pretrained', checkpoint='pretrain/flatten_swin_s.pth')))

recipe_sources = dict(
    pretrained='official: FLatten-Transformer README, flatten_swin_s.pth (TsinghuaCloud https://cloud.tsinghua.edu.cn/f/94188e52af354bf4a88b/?dl=1, loaded and converted by init_cfg)')
