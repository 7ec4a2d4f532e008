_base_ = ['./flatten-pvt-t_8xb128_in1k.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

model = dict(backbone=dict(arch='small', drop_path_rate=0.1))
