_base_ = ['./flatten-pvt-t_8xb128_in1k.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

model = dict(backbone=dict(arch='medium', drop_path_rate=0.3))
optim_wrapper = dict(clip_grad=dict(_delete_=True, max_norm=1.0))

recipe_sources = dict(
    drop_path='official: FLatten-Transformer/cfgs/flatten_pvt_m.yaml (0.3)',
    clip_grad='official: FLatten-Transformer/cfgs/flatten_pvt_m.yaml (CLIP_GRAD 1.0)')
