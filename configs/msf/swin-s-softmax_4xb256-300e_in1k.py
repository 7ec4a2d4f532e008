# Softmax baseline of msf-swin-s (paper Table 6, "Orig."): Swin's own
# window attention in the same network.
_base_ = ['./msf-swin-s_4xb256-300e_in1k.py']

model = dict(backbone=dict(mean_shift=False))
