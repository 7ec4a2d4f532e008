_base_ = ['./msf-swin-t_4xb256-300e_in1k.py']

model = dict(backbone=dict(arch='small', drop_path_rate=0.3))
