# MSF-Swin-T on ImageNet-1k, trained with the same protocol as the ViTs (the
# paper trains every network alike, Sec. 3.2); Swin's stochastic depth.
_base_ = ['./msf-vit-s_4xb256-300e_in1k.py']

model = dict(
    backbone=dict(
        _delete_=True,
        type='MSFSwinTransformer',
        arch='tiny',
        drop_path_rate=0.2,
        out_indices=(3, ),
        # As Swin's classifiers: a 7x7 map is one unshifted window.
        pad_small_map=False),
    neck=dict(_delete_=True, type='GlobalAveragePooling'),
    head=dict(in_channels=768))
