# Swin-S + Less-Attention, ImageNet-1k (LaViT Table 5, "Swin+LA"): Swin's
# own recipe (as swin-t-la) with Swin-S's drop path 0.3; blocks 4-18 of
# stage 3 are window Less-Attention layers (see docs/lavit.md for the
# choice).
_base_ = ['./swin-t-la_16xb64_in1k.py']

model = dict(backbone=dict(arch='small', drop_path_rate=0.3))

recipe_sources = dict(
    drop_path='openmmlab: mmpretrain::swin_transformer/'
    'swin-small_16xb64_in1k.py (Swin\'s official drop path 0.3 for Swin-S)')
