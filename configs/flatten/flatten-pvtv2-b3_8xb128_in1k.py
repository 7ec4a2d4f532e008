_base_ = ['./flatten-pvtv2-b0_8xb128_in1k.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

model = dict(
    backbone=dict(arch='b3', drop_path_rate=0.3),
    head=dict(in_channels=512))
optim_wrapper = dict(clip_grad=dict(_delete_=True, max_norm=1.0))
