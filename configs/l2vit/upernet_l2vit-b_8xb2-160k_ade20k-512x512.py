# UperNet L2ViT-B, ADE20K 160k (paper Table 5); the recipe of the L2ViT-T
# config (official upernet_l2vit_base_512x512_160k_ade20k.py).
_base_ = ['./upernet_l2vit-t_8xb2-160k_ade20k-512x512.py']

model = dict(
    backbone=dict(
        arch='base',
        # The official L2ViT-B ImageNet-1k release file ('model' entry),
        # loaded as it is; conversion (optional):
        #   python tools/model_converters/l2vit2vitattn.py \
        #       L2ViT-Base-checkpoint-best-ema.pth pretrain/l2vit-b_vitattn.pth
        init_cfg=dict(
            checkpoint='https://github.com/ChuanyangZheng/L2ViT/releases/download/v1.0/L2ViT-Base-checkpoint-best-ema.pth'  # noqa: E501
        )),
    decode_head=dict(in_channels=[128, 256, 512, 1024]),
    auxiliary_head=dict(in_channels=512))

recipe_sources = dict(
    pretrained='official: L2ViT/readme.md (release v1.0 '
    "L2ViT-Base-checkpoint-best-ema.pth; its 'model' entry, as the "
    'official mmcv_custom load_checkpoint takes it)')
