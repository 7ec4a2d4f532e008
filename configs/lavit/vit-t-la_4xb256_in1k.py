# ViT-T + Less-Attention, ImageNet-1k (LaViT Table 5, "ViT+LA"). "ViT" is
# the plain ViT of "Better plain ViT baselines" (the MSF configs' ViT):
# pixel-normalised patch embedding and fixed 2-D sin-cos positions; blocks
# 4-12 as Less-Attention layers, as DeiT+LA. Table 5 names no recipe for its
# ViT rows (ViT-T 72.2 is DeiT-T's number); LaViT Sec. 4.3 trains with
# DeiT's, so this is deit-t-la's recipe (DeiT paper: 5 warm-up epochs, drop
# path 0.1, no clipping, lr 5e-4 * 1024 / 512, repeated augmentation).
_base_ = ['./deit-t-la_4xb256_in1k.py']

model = dict(backbone=dict(patch_embed='pixel_norm', pos_embed='sincos'))

# Every other entry as deit-t-la.
recipe_sources = dict(
    augmentation='paper: LaViT Sec. 4.3 (DeiT\'s augmentation and '
    'regularization for every model; Table 5 names no other recipe for ViT)')
