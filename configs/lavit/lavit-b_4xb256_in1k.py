# LaViT-B, ImageNet-1k (paper Table 2).
_base_ = ['./lavit-t_4xb256_in1k.py']

model = dict(backbone=dict(arch='base', drop_path_rate=0.3))
