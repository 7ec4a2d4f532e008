# LaViT-B, ImageNet-1k (paper Table 2): lavit-t's recipe (paper Sec. 4.3,
# DeiT's augmentation and regularization, lr 0.005, no clipping) with drop
# path 0.3, PVT-M / PVT-L's, for this PVT-M-sized model (the paper gives no
# drop path; DeiT's 0.1 is for its tiny and small models).
_base_ = ['./lavit-t_4xb256_in1k.py']

model = dict(backbone=dict(arch='base', drop_path_rate=0.3))

# Every other entry as lavit-t.
recipe_sources = dict(
    drop_path='ours: 0.3 as PVT-M / PVT-L (LaViT-B is PVT-M-sized; the '
    'paper gives none and DeiT\'s 0.1 is for its T / S models)')
