# mmseg's own UperNet Swin-T 160k: the counter's segmentation reference point
# (945.7 G / 59.94 M at 512x2048) and the FLatten/L2ViT/MSF baseline row.
_base_ = [
    'mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'  # noqa: E501
]
custom_imports = dict(imports=['vitattn_mm'], allow_failed_imports=False)
