# UperNet LaViT-S, ADE20K 160k (paper Table 4): mmseg's Swin UperNet recipe
# (AdamW lr 6e-5, wd 0.01, 1500-iteration warm-up, poly decay, batch 16).
_base_ = [
    'mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'  # noqa: E501
]
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

model = dict(
    type='AuxLossEncoderDecoder',
    backbone=dict(
        _delete_=True,
        type='LaViT',
        arch='small',
        drop_path_rate=0.1,
        dp_loss_weight=0.1,
        out_indices=(0, 1, 2, 3),
        # ImageNet-1k weights from configs/lavit/lavit-s_4xb256_in1k.py (no
        # official LaViT weights exist).
        init_cfg=dict(
            type='Pretrained', checkpoint='pretrain/lavit_s_in1k.pth')),
    decode_head=dict(in_channels=[64, 128, 320, 512]),
    auxiliary_head=dict(in_channels=320))

# No weight decay on norms, position embeddings, the attention residual's
# LayerScale or the Less-Attention transforms (identity-initialised).
optim_wrapper = dict(
    paramwise_cfg=dict(
        custom_keys={
            'pos_embed': dict(decay_mult=0.),
            'layer_scale': dict(decay_mult=0.),
            'transform': dict(decay_mult=0.)
        }))
