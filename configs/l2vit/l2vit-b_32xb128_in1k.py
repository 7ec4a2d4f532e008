# L2ViT-B on ImageNet-1k (paper Table 2); the recipe of the L2ViT-T config,
# stochastic depth 0.4 (paper Table 9; the official README's example command
# for L2ViT_Base says --drop_path 0.3, the paper's table is followed).
_base_ = ['./l2vit-t_32xb128_in1k.py']

model = dict(
    backbone=dict(arch='base', drop_path_rate=0.4),
    head=dict(in_channels=1024))

recipe_sources = dict(
    drop_path='paper: L2ViT Table 9 (stochastic depth 0.4 for L2ViT-B; the '
    'official README example command says 0.3)')
