# Swin-S + Less-Attention, ImageNet-1k (LaViT Table 5, "Swin+LA"):
# mmpretrain's Swin-S recipe (drop path 0.3); blocks 4-18 of stage 3 are
# window Less-Attention layers (see docs/lavit.md for the choice).
_base_ = ['./swin-t-la_16xb64_in1k.py']

model = dict(backbone=dict(arch='small', drop_path_rate=0.3))
