# SETR-MLA with MSF-ViT-S, 2-group interleaved projection (paper Table 7).
_base_ = ['./setr_msf-vit-s_mla_8xb2-160k_ade20k-512x512.py']

model = dict(
    backbone=dict(
        groups=2,
        # SimpleViTS_msf-g2 (official code) or
        # msf-vit-s-g2_4xb256-300e_in1k.py.
        init_cfg=dict(checkpoint='pretrain/msf-vit-s-g2_in1k.pth')))

recipe_sources = dict(
    pretrained='ours: pretrain/msf-vit-s-g2_in1k.pth: a SimpleViTS_msf-g2 '
    'checkpoint of the official train.py or msf-vit-s-g2_4xb256-300e_in1k.py; '
    'MSF released no weights')
