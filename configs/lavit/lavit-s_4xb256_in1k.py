# LaViT-S, ImageNet-1k (paper Table 2).
_base_ = ['./lavit-t_4xb256_in1k.py']

model = dict(backbone=dict(arch='small'))
