# MSF-Swin-T on ImageNet-1k, trained with the same protocol as the ViTs (the
# paper trains every network alike, Sec. 3.2): the official train.py
# defaults, so weight decay on every parameter (relative position bias
# tables included) and the gradient norm clipped at 1; Swin's stochastic
# depth.
_base_ = ['./msf-vit-s_4xb256-300e_in1k.py']

model = dict(
    backbone=dict(
        _delete_=True,
        type='MSFSwinTransformer',
        arch='tiny',
        # torchvision's swin_t default (stochastic_depth_prob 0.2), which the
        # official train.py would build for a non-ViT model; Swin's own value.
        drop_path_rate=0.2,
        out_indices=(3, ),
        # As Swin's classifiers: a 7x7 map is one unshifted window.
        pad_small_map=False),
    neck=dict(_delete_=True, type='GlobalAveragePooling'),
    head=dict(in_channels=768))

recipe_sources = dict(
    drop_path='ours: 0.2, Swin-T\'s own value and torchvision swin_t\'s '
    'default (the official train.py builds non-ViT models from '
    'torchvision.models); the paper does not state it')
