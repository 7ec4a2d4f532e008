# FLatten-CSwin-S: the -T recipe with drop path 0.4.
_base_ = ['./flatten-cswin-t_8xb128_in1k.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
# EMA: the official -S run (cfgs/flatten_cswin_s.yaml, 8 GPUs x 128 = 1024
# images per iteration) uses decay 0.99984 at batch 1024 already: window
# 1024 / 1.6e-4 = 6.4M images, kept as is (momentum 1.6e-4).
custom_hooks = [
    dict(type='EMAHook', momentum=1.6e-4, priority='ABOVE_NORMAL'),
    dict(type='CheckpointCheckHook')
]

model = dict(backbone=dict(arch='s', drop_path_rate=0.4))

_FL = 'official: FLatten-Transformer/'
recipe_sources = dict(
    optimizer='paper: FLatten Section 5.1 (AdamW)',
    lr=_FL + 'main_ema.py (BASE_LR 5e-4 per 512 images: 1e-3 at 1024)',
    weight_decay=_FL + 'cfgs/flatten_cswin_s.yaml (0.05)',
    batch=_FL + 'cfgs/flatten_cswin_s.yaml (8x128)',
    schedule='paper: FLatten Section 5.1 (300 epochs, cosine)',
    warmup='paper: FLatten Section 5.1 (20 epochs)',
    drop_path=_FL + 'cfgs/flatten_cswin_s.yaml (0.4)',
    clip_grad=_FL + 'cfgs/flatten_cswin_s.yaml (CLIP_GRAD None)',
    ema=_FL + 'README (--model-ema-decay 0.99984 at 8x128 = 1024 images)',
    augmentation='paper: FLatten Section 5.1 (DeiT augmentation)')
