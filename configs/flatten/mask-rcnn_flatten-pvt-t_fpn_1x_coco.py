_base_ = ['../baselines/mask-rcnn_pvt-t_fpn_1x_coco.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='FLattenPVT',
        arch='tiny',
        drop_path_rate=0.1,
        out_indices=(0, 1, 2, 3),
        # Official flatten_pvt_t.pth ({'model': ...}, official key names).
        init_cfg=dict(
            type='Pretrained', checkpoint='pretrain/flatten_pvt_t.pth')))

# PVT's recipe; no weight decay on norms, position embeddings, positional
# encodings or the focusing scales.
optim_wrapper = dict(
    paramwise_cfg=dict(
        custom_keys={
            'norm': dict(decay_mult=0.),
            'pos_embed': dict(decay_mult=0.),
            'positional_encoding': dict(decay_mult=0.),
            'attn.scale': dict(decay_mult=0.)
        }))

recipe_sources = dict(
    drop_path='official: FLatten-Transformer/cfgs/flatten_pvt_t.yaml (0.1, '
    "also PVT's dense-prediction value)",
    pretrained='official: FLatten-Transformer README, flatten_pvt_t.pth (TsinghuaCloud https://cloud.tsinghua.edu.cn/f/3ab1d773f19d45648690/?dl=1, loaded and converted by init_cfg)')
