_base_ = ['./flatten-swin-t_8xb128_in1k.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

model = dict(
    backbone=dict(arch='base', drop_path_rate=0.5),
    head=dict(in_channels=1024))

recipe_sources = dict(
    drop_path='official: FLatten-Transformer/cfgs/flatten_swin_b.yaml (0.5)')
