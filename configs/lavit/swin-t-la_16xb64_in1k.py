# Swin-T + Less-Attention, ImageNet-1k (LaViT Table 5, "Swin+LA"): Swin's
# own recipe, the one behind Table 5's Swin-T 81.2 (mmpretrain's Swin-T
# config reproduces it: 300 epochs, batch 1024, AdamW lr 1e-3 wd 0.05,
# cosine after 20 warm-up epochs, drop path 0.2, gradient clipping 5, no
# EMA, no repeated augmentation) with the second block of every stage a
# window Less-Attention layer and the attention residual between stages.
# AuxLossImageClassifier adds the diagonality-preserving loss (`loss_dp`).
_base_ = ['mmpretrain::swin_transformer/swin-tiny_16xb64_in1k.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
custom_hooks = [dict(type='CheckpointCheckHook')]

model = dict(
    type='AuxLossImageClassifier',
    backbone=dict(
        _delete_=True,
        type='LessAttnSwinTransformer',
        arch='tiny',
        drop_path_rate=0.2,
        dp_loss_weight=0.1,
        out_indices=(3, )),
    head=dict(in_channels=768))

# No weight decay on the attention residual's LayerScale or the
# identity-initialised Less-Attention transforms either.
optim_wrapper = dict(
    paramwise_cfg=dict(
        custom_keys={
            'layer_scale': dict(decay_mult=0.),
            'transform': dict(decay_mult=0.)
        }))

# All values are the stock base's, Swin's official ImageNet recipe.
recipe_sources = dict(
    dict.fromkeys(
        ('optimizer', 'lr', 'weight_decay', 'batch', 'schedule', 'warmup',
         'drop_path', 'clip_grad', 'ema', 'augmentation', 'amp'),
        'openmmlab: mmpretrain::swin_transformer/swin-tiny_16xb64_in1k.py '
        '(Swin\'s official recipe, behind Table 5\'s Swin 81.2 / 83.2)'),
    pretrained='paper: LaViT Table 5 (trained from scratch)')
