# L2ViT-T on ImageNet-1k (paper Table 2), the official recipe, which is
# ConvNeXt's: 300 epochs at batch 4096 (official: 8 GPUs x 128 x 4
# accumulation steps), AdamW lr 4e-3 wd 0.05, cosine after 20 warm-up
# epochs, RandAugment, Mixup 0.8 / CutMix 1.0, label smoothing 0.1, random
# erasing 0.25, EMA 0.9999, truncated-normal init; stochastic depth 0.1.
_base_ = ['mmpretrain::convnext/convnext-tiny_32xb128_in1k.py']
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='L2ViT',
        arch='tiny',
        drop_path_rate=0.1,
        out_indices=(3, )),
    # The official classifier: final LayerNorm (norm3), average pooling.
    neck=dict(type='GlobalAveragePooling'),
    head=dict(in_channels=768))

# Norms, biases and other 1-d parameters are already decay-free here; the
# linear attention's temperatures too.
optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={'temperature': dict(decay_mult=0.)}))
