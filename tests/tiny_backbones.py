"""The one catalogue of tiny archs: every skeleton's, and where a family's
arch needs more keys (Less-Attention's ``la_start``), the family's.

Small widths, even heads (CSwin's stripes split them between two branches)
and two blocks in the middle stages (Less-Attention puts an LA layer after
a VA layer of the same stage). Every registered backbone resolves to one
of these through :func:`tiny_kwargs`; a test fails for one that does not.
"""
import torch
from mmengine.registry import MODELS, init_default_scope

import vitattn_mm  # noqa: F401
from vitattn_mm.models import backbones
from vitattn_mm.models.backbones import (AttnCSwinTransformer, AttnPVT,
                                         AttnPVTv2, AttnSwinTransformer,
                                         AttnViT, L2ViT)

_SWIN = dict(embed_dims=16, depths=[1, 2, 2, 1], num_heads=[2, 2, 4, 4])
_PVT = dict(embed_dims=[16, 32, 32, 64], depths=[1, 2, 2, 1],
            num_heads=[2, 2, 4, 4], mlp_ratios=[2, 2, 2, 2])
_VIT = dict(embed_dims=32, depth=3, num_heads=2)

#: Each skeleton's tiny arguments.
SKELETONS = {
    AttnSwinTransformer: dict(arch=_SWIN, mlp_ratio=2),
    AttnPVT: dict(arch=_PVT),
    AttnPVTv2: dict(arch=_PVT),
    AttnViT: dict(arch=_VIT, out_indices=(0, 1, 2), with_cls_token=False,
                  out_type='featmap'),
    AttnCSwinTransformer: dict(arch=_SWIN, mlp_ratio=2),
    L2ViT: dict(arch=dict(_PVT, depths=[2, 2, 2, 2]), mlp_ratio=2),
}

#: Families whose arch needs more than their skeleton's keys.
FAMILIES = {
    'LaViT': dict(arch=dict(_PVT, depths=[1, 2, 2, 2],
                            la_start=[0, 2, 2, 2])),
    'LessAttnSwinTransformer': dict(
        arch=dict(_SWIN, depths=[1, 2, 3, 2], la_start=[0, 2, 3, 2]),
        mlp_ratio=2),
    'LessAttnViT': dict(arch=dict(_VIT, la_start=2), out_indices=(0, 1, 2)),
    'FLattenDeiT': dict(arch=_VIT, out_indices=(0, 1, 2)),
    'MSFViT': dict(arch=_VIT, out_indices=(0, 1, 2)),
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
