# DeiT-S + Less-Attention, ImageNet-1k (LaViT Table 5, "DeiT+LA"): the DeiT
# paper's recipe of deit-t-la (DeiT-S 79.9 in Table 5 is DeiT's own run:
# drop path 0.1, 5 warm-up epochs, no clipping, lr 5e-4 * 1024 / 512) with
# blocks 6-12 as Less-Attention layers: the seven LA layers that give Table
# 5's 10.6% FLOP reduction (ViT-S+LA's 13.1% is the tiny models' nine;
# docs/lavit.md).
_base_ = ['./deit-t-la_4xb256_in1k.py']

model = dict(
    backbone=dict(arch='small', la_start=6), head=dict(in_channels=384))

# Every other entry as deit-t-la (DeiT uses one recipe for T and S).
recipe_sources = dict(
    drop_path='official: deit/main.py (--drop-path 0.1, DeiT-S as DeiT-T)')
