# FLatten-CSwin-S: the -T recipe with drop path 0.4.
_base_ = ['./flatten-cswin-t_8xb128_in1k.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

model = dict(backbone=dict(arch='s', drop_path_rate=0.4))
