# ViT-S + Less-Attention, ImageNet-1k (LaViT Table 5, "ViT+LA"): as
# vit-t-la (the DeiT paper's recipe), at the small width.
_base_ = ['./vit-t-la_4xb256_in1k.py']

model = dict(backbone=dict(arch='small'), head=dict(in_channels=384))

# Every entry as vit-t-la / deit-t-la.
recipe_sources = dict(
    drop_path='official: deit/main.py (--drop-path 0.1, S as T)')
