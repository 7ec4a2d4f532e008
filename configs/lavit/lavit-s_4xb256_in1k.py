# LaViT-S, ImageNet-1k (paper Table 2): lavit-t's recipe (paper Sec. 4.3,
# DeiT's augmentation and regularization, lr 0.005, no clipping).
_base_ = ['./lavit-t_4xb256_in1k.py']

model = dict(backbone=dict(arch='small'))

# Every entry as lavit-t (the paper gives one recipe for T / S / B).
recipe_sources = dict(
    drop_path='official: deit/main.py (--drop-path 0.1; LaViT Sec. 4.3 '
    'follows DeiT)')
