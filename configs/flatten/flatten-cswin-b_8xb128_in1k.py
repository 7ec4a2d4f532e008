# FLatten-CSwin-B: the -T recipe with drop path 0.5, weight decay 0.1 and
# EMA decay 0.99982 per iteration (the official values).
_base_ = ['./flatten-cswin-t_8xb128_in1k.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

model = dict(
    backbone=dict(arch='b', drop_path_rate=0.5), head=dict(in_channels=768))
optim_wrapper = dict(optimizer=dict(weight_decay=0.1))
custom_hooks = [
    dict(type='EMAHook', momentum=1.8e-4, priority='ABOVE_NORMAL')
]
