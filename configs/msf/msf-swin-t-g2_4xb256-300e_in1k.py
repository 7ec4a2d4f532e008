# MSF with the 2-group interleaved q/k/v/p projection (paper Table 6).
_base_ = ['./msf-swin-t_4xb256-300e_in1k.py']

model = dict(backbone=dict(groups=2))
