# ViT-T + Less-Attention, ImageNet-1k (LaViT Table 5, "ViT+LA"). "ViT" is
# the plain ViT of "Better plain ViT baselines" (the MSF configs' ViT):
# pixel-normalised patch embedding and fixed 2-D sin-cos positions; the
# DeiT-T recipe and blocks 4-12 as Less-Attention layers, as DeiT+LA.
_base_ = ['./deit-t-la_4xb256_in1k.py']

model = dict(backbone=dict(patch_embed='pixel_norm', pos_embed='sincos'))
