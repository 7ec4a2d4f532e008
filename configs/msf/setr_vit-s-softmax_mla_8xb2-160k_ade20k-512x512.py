# The softmax ViT-S baseline of the SETR rows (paper Table 7, "Orig.").
_base_ = ['./setr_msf-vit-s_mla_8xb2-160k_ade20k-512x512.py']

model = dict(
    backbone=dict(
        mean_shift=False,
        # SimpleViTS_orig (official code) or vit-s-softmax_4xb256-300e_in1k.py.
        init_cfg=dict(checkpoint='pretrain/vit-s-softmax_in1k.pth')))

recipe_sources = dict(
    pretrained='ours: pretrain/vit-s-softmax_in1k.pth: a SimpleViTS_orig '
    'checkpoint of the official train.py or '
    'vit-s-softmax_4xb256-300e_in1k.py; MSF released no weights')
