_base_ = ['./msf-swin-t_4xb256-300e_in1k.py']

# torchvision's swin_s default (stochastic_depth_prob 0.3); Swin-S's own.
model = dict(backbone=dict(arch='small', drop_path_rate=0.3))

recipe_sources = dict(
    drop_path='ours: 0.3, Swin-S\'s own value and torchvision swin_s\'s '
    'default (the official train.py builds non-ViT models from '
    'torchvision.models); the paper does not state it')
