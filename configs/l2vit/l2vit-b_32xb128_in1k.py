# L2ViT-B on ImageNet-1k (paper Table 2); the recipe of the L2ViT-T config,
# stochastic depth 0.4.
_base_ = ['./l2vit-t_32xb128_in1k.py']

model = dict(
    backbone=dict(arch='base', drop_path_rate=0.4),
    head=dict(in_channels=1024))
