# ViT-S + Less-Attention, ImageNet-1k (LaViT Table 5, "ViT+LA"): as
# vit-t-la, at the small width.
_base_ = ['./vit-t-la_4xb256_in1k.py']

model = dict(backbone=dict(arch='small'), head=dict(in_channels=384))
