_base_ = ['./flatten-pvtv2-b0_8xb128_in1k.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

model = dict(
    backbone=dict(arch='b1', drop_path_rate=0.1),
    head=dict(in_channels=512))
