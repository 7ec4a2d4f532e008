# L2ViT-S on ImageNet-1k (paper Table 2); the recipe of the L2ViT-T config,
# stochastic depth 0.3 (paper Table 9).
_base_ = ['./l2vit-t_32xb128_in1k.py']

model = dict(backbone=dict(arch='small', drop_path_rate=0.3))

recipe_sources = dict(
    drop_path='paper: L2ViT Table 9 (stochastic depth 0.3 for L2ViT-S)')
