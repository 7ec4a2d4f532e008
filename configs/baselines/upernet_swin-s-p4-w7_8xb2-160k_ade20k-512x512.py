# mmseg's own UperNet Swin-S 160k: the FLatten table's "Swin-S 1038G / 81M"
# row.
_base_ = [
    'mmseg::swin/swin-small-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'  # noqa: E501
]
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
custom_hooks = [dict(type='CheckpointCheckHook')]

# mmseg's config is the Swin release's UperNet Swin-S recipe (as -T, drop
# path 0.3), behind the FLatten Table 1 Swin-S row (47.64).
recipe_sources = dict(
    optimizer='openmmlab: mmseg::swin/swin-small-patch4-window7-in1k-pre_'
    "upernet_8xb2-160k_ade20k-512x512.py (the Swin release's UperNet "
    "recipe, behind FLatten Table 1's Swin-S row)")
