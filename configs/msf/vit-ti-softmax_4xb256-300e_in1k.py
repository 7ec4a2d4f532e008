# Softmax baseline of msf-vit-ti (paper Table 6, "Orig."): the same
# Simple ViT with plain softmax attention and no probe.
_base_ = ['./msf-vit-ti_4xb256-300e_in1k.py']

model = dict(backbone=dict(mean_shift=False))
