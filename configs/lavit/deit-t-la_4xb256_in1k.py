# DeiT-T + Less-Attention, ImageNet-1k (LaViT Table 5, "DeiT+LA"):
# mmpretrain's DeiT-T recipe (300 epochs, batch 1024, AdamW, Mixup / CutMix,
# label smoothing) with DeiT-T's blocks 4-12 as Less-Attention layers.
# No class token (LessAttnViT serves dense prediction at any size): the mean
# token through the last norm feeds a linear head. AuxLossImageClassifier
# adds the diagonality-preserving loss (`loss_dp`).
_base_ = ['mmpretrain::deit/deit-tiny_4xb256_in1k.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

model = dict(
    type='AuxLossImageClassifier',
    backbone=dict(
        _delete_=True,
        type='LessAttnViT',
        arch='tiny',
        dp_loss_weight=0.1,
        out_type='avg_featmap'),
    head=dict(type='LinearClsHead', in_channels=192))

# No weight decay on position embeddings or the identity-initialised
# Less-Attention transforms either.
optim_wrapper = dict(
    paramwise_cfg=dict(
        custom_keys={
            'pos_embed': dict(decay_mult=0.),
            'transform': dict(decay_mult=0.)
        }))
