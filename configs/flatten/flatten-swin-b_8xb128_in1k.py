_base_ = ['./flatten-swin-t_8xb128_in1k.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

model = dict(
    backbone=dict(arch='base', drop_path_rate=0.5),
    head=dict(in_channels=1024))
