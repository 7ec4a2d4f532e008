_base_ = ['./msf-vit-s_4xb256-300e_in1k.py']

model = dict(backbone=dict(arch='b'), head=dict(in_channels=768))
