# DeiT-S + Less-Attention, ImageNet-1k (LaViT Table 5, "DeiT+LA"):
# mmpretrain's DeiT-S recipe with blocks 6-12 as Less-Attention layers: the
# seven LA layers that give Table 5's 10.6% FLOP reduction (ViT-S+LA's
# 13.1% is the tiny models' nine; docs/lavit.md).
_base_ = ['./deit-t-la_4xb256_in1k.py']

model = dict(
    backbone=dict(arch='small', la_start=6), head=dict(in_channels=384))
