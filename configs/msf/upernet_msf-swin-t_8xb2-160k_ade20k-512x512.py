# mmseg's UperNet Swin-T 160k recipe (AdamW 6e-5, wd 0.01, poly; no decay on
# norms and relative position bias tables) with MSF attention in every
# window. MSF adds no parameter kinds of its own.
_base_ = [
    'mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'  # noqa: E501
]
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
custom_hooks = [dict(type='CheckpointCheckHook')]

model = dict(
    backbone=dict(
        _delete_=True,
        type='MSFSwinTransformer',
        arch='tiny',
        drop_path_rate=0.3,
        out_indices=(0, 1, 2, 3),
        # ImageNet-1k weights of msf-swin-t_4xb256-300e_in1k.py (the paper
        # released no Swin weights).
        init_cfg=dict(type='Pretrained',
                      checkpoint='pretrain/msf-swin-t_in1k.pth')))

# No paper row (MSF has no UperNet experiment): mmseg's recipe, which is the
# Swin release's UperNet 160k protocol. Values not listed are the stock
# base's.
recipe_sources = dict(
    optimizer='openmmlab: mmseg::swin/swin-tiny-patch4-window7-in1k-pre_'
    'upernet_8xb2-160k_ade20k-512x512.py (ours: the MSF paper has no UperNet '
    'rows; this is the Swin release\'s UperNet protocol)',
    pretrained='ours: pretrain/msf-swin-t_in1k.pth, trained with '
    'configs/msf/msf-swin-t_4xb256-300e_in1k.py (MSF released no weights)')
