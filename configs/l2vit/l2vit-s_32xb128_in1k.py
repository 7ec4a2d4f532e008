# L2ViT-S on ImageNet-1k (paper Table 2); the recipe of the L2ViT-T config,
# stochastic depth 0.3.
_base_ = ['./l2vit-t_32xb128_in1k.py']

model = dict(backbone=dict(arch='small', drop_path_rate=0.3))
