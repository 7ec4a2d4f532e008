# UperNet Swin-T+LA, ADE20K 160k: mmseg's Swin-T UperNet recipe (AdamW
# lr 6e-5, wd 0.01, 1500-iteration warm-up, poly decay, batch 16) with the
# Less-Attention Swin-T backbone. AuxLossEncoderDecoder adds the backbone's
# diagonality-preserving loss as `loss_dp`.
_base_ = [
    'mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'  # noqa: E501
]
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
custom_hooks = [dict(type='CheckpointCheckHook')]

model = dict(
    type='AuxLossEncoderDecoder',
    backbone=dict(
        _delete_=True,
        type='LessAttnSwinTransformer',
        arch='tiny',
        drop_path_rate=0.3,
        dp_loss_weight=0.1,
        out_indices=(0, 1, 2, 3),
        # ImageNet-1k weights from configs/lavit/swin-t-la_16xb64_in1k.py
        # (no official weights exist).
        init_cfg=dict(
            type='Pretrained', checkpoint='pretrain/swin_t_la_in1k.pth')))

# Besides the base's keys (position embeddings, relative position bias,
# norms): no decay on the attention residual's LayerScale or the
# identity-initialised Less-Attention transforms.
optim_wrapper = dict(
    paramwise_cfg=dict(
        custom_keys={
            'layer_scale': dict(decay_mult=0.),
            'transform': dict(decay_mult=0.)
        }))

_swin = ('openmmlab: mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_'
         '8xb2-160k_ade20k-512x512.py (Swin\'s UperNet recipe, behind the '
         'UperNet Swin-T baseline 44.5)')
recipe_sources = dict(
    optimizer=_swin,
    lr=_swin,
    weight_decay=_swin,
    batch=_swin,
    schedule=_swin,
    warmup=_swin,
    drop_path=_swin,
    augmentation=_swin,
    pretrained='ours: ImageNet-1k weights trained with '
    'configs/lavit/swin-t-la_16xb64_in1k.py (no official weights exist)')
