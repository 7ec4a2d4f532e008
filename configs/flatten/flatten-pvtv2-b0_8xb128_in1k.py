# ImageNet-1k, the official FLatten-PVTv2 recipe (as FLatten-PVT's).
_base_ = ['./flatten-pvt-t_8xb128_in1k.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='FLattenPVTv2',
        arch='b0',
        drop_path_rate=0.1,
        out_indices=(3, )),
    head=dict(in_channels=256))

_FL = 'official: FLatten-Transformer/'
recipe_sources = dict(
    warmup=_FL + 'cfgs/flatten_pvt_v2_b0.yaml (WARMUP_EPOCHS 5)',
    drop_path=_FL + 'cfgs/flatten_pvt_v2_b*.yaml',
    clip_grad=_FL + 'cfgs/flatten_pvt_v2_b0.yaml (CLIP_GRAD None)')
