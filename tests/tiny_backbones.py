"""The one catalogue of tiny archs: :data:`ARCHS` names every small arch
dict the tests build, :data:`SKELETONS` gives each skeleton's tiny
arguments and :data:`FAMILIES` a family's where its arch needs more keys
(Less-Attention's ``la_start``).

Small widths, even heads (CSwin's stripes split them between two branches)
and two blocks in the middle stages (Less-Attention puts an LA layer after
a VA layer of the same stage). Every registered backbone resolves to one
of these through :func:`tiny_kwargs`; a test fails for one that does not.
A test file imports its archs from here; an arch gets its own entry only
where a test depends on its numbers (a shape, a width, ``la_start``).
"""
import torch
from mmengine.registry import MODELS, init_default_scope

import vitattn_mm  # noqa: F401
from vitattn_mm.models import backbones
from vitattn_mm.models.backbones import (AttnCSwinTransformer, AttnPVT,
                                         AttnPVTv2, AttnSwinTransformer,
                                         AttnViT, L2ViT)

# --------------------------------------------------------------- the archs
_SWIN = dict(embed_dims=16, depths=[1, 2, 2, 1], num_heads=[2, 2, 4, 4])
_PVT = dict(embed_dims=[16, 32, 32, 64], depths=[1, 2, 2, 1],
            num_heads=[2, 2, 4, 4], mlp_ratios=[2, 2, 2, 2])
_VIT = dict(embed_dims=32, depth=3, num_heads=2)

#: Every tiny arch of the test suite, by name (``<family>-<depths>``).
ARCHS = {
    # Swin / CSwin / FLatten-Swin / MSF-Swin: shifted and unshifted windows
    # in stages 2-3, even heads for CSwin's two stripe branches.
    'swin-1221': _SWIN,
    # PVT / PVTv2 / FLatten-PVT: spatial reduction in stages 1-3, two
    # blocks in the middle stages.
    'pvt-1221': _PVT,
    # PVT with an 8-channel stage 1, one block a stage: test_layers asserts
    # its resized (1, 256, 8) stage-1 position table.
    'pvt-1111-w8': dict(embed_dims=[8, 16, 32, 64], depths=[1, 1, 1, 1],
                       num_heads=[1, 2, 2, 4], mlp_ratios=[4, 4, 4, 4]),
    # Plain ViT / FLatten-DeiT / MSF-ViT: three blocks, one output each.
    'vit-3': _VIT,
    # L2ViT: even depths, so every stage has its local-window block and
    # its global block (the blocks alternate).
    'l2vit-2222': dict(_PVT, depths=[2, 2, 2, 2]),
    # LaViT as the shared contract builds it: one LA layer after the VA
    # layer of stages 2-4 (the PVT widths).
    'lavit-1222': dict(_PVT, depths=[1, 2, 2, 2], la_start=[0, 2, 2, 2]),
    # LaViT of test_lavit: stage 2's VA layer keeps no logits (the residual
    # enters the fused kernel as its mask), stage 3 has a VA layer keeping
    # its logits then two chained LA layers, stage 4 a VA then an LA layer;
    # widths 16-128 (its detector neck and classifier head read them).
    'lavit-1232': dict(embed_dims=[16, 32, 64, 128], depths=[1, 2, 3, 2],
                       num_heads=[1, 2, 2, 4], mlp_ratios=[2, 2, 2, 2],
                       la_start=[0, 0, 2, 2]),
    # Swin+LA as the shared contract builds it: LA layers in stages 2-4,
    # stage 3's after a shifted and an unshifted VA layer.
    'lessattn-swin-1232': dict(_SWIN, depths=[1, 2, 3, 2],
                               la_start=[0, 2, 3, 2]),
    # Swin+LA with an LA layer in every stage and two chained in stage 3:
    # the training test's gradients reach LA layers of every stage.
    'lessattn-swin-2232': dict(_SWIN, depths=[2, 2, 3, 2],
                               la_start=[2, 2, 2, 2]),
    # ViT+LA: one VA block, then two LA blocks.
    'lessattn-vit-3': dict(_VIT, la_start=2),
    # MSF's official SimpleViT layout in small: the fake official file of
    # test_msf / test_loading_safety (its forward is restated there).
    'msf-simplevit-2': dict(embed_dims=64, depth=2, num_heads=2),
}

#: Each skeleton's tiny arguments.
SKELETONS = {
    AttnSwinTransformer: dict(arch=ARCHS['swin-1221'], mlp_ratio=2),
    AttnPVT: dict(arch=ARCHS['pvt-1221']),
    AttnPVTv2: dict(arch=ARCHS['pvt-1221']),
    AttnViT: dict(arch=ARCHS['vit-3'], out_indices=(0, 1, 2),
                  with_cls_token=False, out_type='featmap'),
    AttnCSwinTransformer: dict(arch=ARCHS['swin-1221'], mlp_ratio=2),
    L2ViT: dict(arch=ARCHS['l2vit-2222'], mlp_ratio=2),
}

#: Families whose arch needs more than their skeleton's keys.
FAMILIES = {
    'LaViT': dict(arch=ARCHS['lavit-1222']),
    'LessAttnSwinTransformer': dict(arch=ARCHS['lessattn-swin-1232'],
                                    mlp_ratio=2),
    'LessAttnViT': dict(arch=ARCHS['lessattn-vit-3'], out_indices=(0, 1, 2)),
    'FLattenDeiT': dict(arch=ARCHS['vit-3'], out_indices=(0, 1, 2)),
    'MSFViT': dict(arch=ARCHS['vit-3'], out_indices=(0, 1, 2)),
}


def registered_backbones() -> list:
    """Names of every backbone the package registers."""
    return sorted(n for n in dir(backbones) if n[0].isupper())


def skeleton_of(cls: type) -> type:
    """The skeleton ``cls`` is (or is built on)."""
    for base in cls.__mro__:
        if base in SKELETONS:
            return base
    raise KeyError(f'{cls.__name__} is built on no known skeleton; add its '
                   'skeleton to tests/tiny_backbones.py')


def tiny_kwargs(name: str) -> dict:
    """Constructor arguments of a tiny ``name``."""
    if name in FAMILIES:
        return dict(FAMILIES[name])
    return dict(SKELETONS[skeleton_of(getattr(backbones, name))])


def build_tiny(name: str, **overrides) -> torch.nn.Module:
    """A tiny ``name`` (seeded), through the registry, in eval mode."""
    init_default_scope('mmdet')
    torch.manual_seed(0)
    return MODELS.build(dict(type=name, **{**tiny_kwargs(name),
                                           **overrides})).eval()
