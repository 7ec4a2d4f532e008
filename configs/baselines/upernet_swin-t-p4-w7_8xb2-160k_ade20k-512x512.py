# mmseg's own UperNet Swin-T 160k: the counter's segmentation reference point
# (945.7 G / 59.94 M at 512x2048) and the FLatten/L2ViT/MSF baseline row.
_base_ = [
    'mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'  # noqa: E501
]
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
custom_hooks = [dict(type='CheckpointCheckHook')]

# mmseg's config is the Swin release's UperNet recipe (Swin-Transformer-
# Semantic-Segmentation upernet_swin_tiny_patch4_window7_512x512_160k_ade20k:
# AdamW 6e-5, wd 0.01, poly, 1500 warm-up iterations, batch 16, 160k, drop
# path 0.3), which the FLatten / L2ViT / LaViT / MSF Swin-T rows (44.5) copy.
recipe_sources = dict(
    optimizer='openmmlab: mmseg::swin/swin-tiny-patch4-window7-in1k-pre_'
    "upernet_8xb2-160k_ade20k-512x512.py (the Swin release's UperNet "
    "recipe, behind the papers' Swin-T 44.5 row)")
