# Softmax baseline of msf-vit-b (paper Table 6, "Orig."): the same
# Simple ViT with plain softmax attention and no probe.
_base_ = ['./msf-vit-b_4xb256-300e_in1k.py']

model = dict(backbone=dict(mean_shift=False))
