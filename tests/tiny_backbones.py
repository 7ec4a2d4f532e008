"""Small instances of every registered backbone, for the export and
compile tests."""
import torch
from mmengine.registry import MODELS, init_default_scope

import vitattn_mm  # noqa: F401

_PVT = dict(arch=dict(embed_dims=[16, 32, 32, 64], depths=[1, 1, 1, 1],
                      num_heads=[1, 2, 2, 4], mlp_ratios=[2, 2, 2, 2]))
_CSWIN = dict(arch=dict(embed_dims=16, depths=[1, 1, 2, 1],
                        num_heads=[2, 2, 4, 4]))
_VIT = dict(arch=dict(embed_dims=32, depth=2, num_heads=2), out_indices=(0, 1))

#: Small instances of every registered backbone (two to four stages, one
#: or two blocks each): the export paths are the full models', the graphs
#: only shorter.
TINY_BACKBONES = {
    # The skeletons with their default attention.
    'AttnSwinTransformer':
    dict(arch=dict(embed_dims=16, depths=[1, 1, 2, 1],
                   num_heads=[1, 2, 2, 4])),
    'AttnPVT': _PVT,
    'AttnPVTv2': _PVT,
    'AttnViT': _VIT,
    'AttnCSwinTransformer': _CSWIN,
    # The families.
    'FLattenCSwinTransformer': _CSWIN,
    'FLattenDeiT': _VIT,
    'FLattenSwinTransformer':
    dict(arch=dict(embed_dims=16, depths=[1, 2, 1, 2],
                   num_heads=[1, 2, 2, 4])),
    'FLattenPVT': _PVT,
    'FLattenPVTv2': _PVT,
    'L2ViT':
    dict(arch=dict(embed_dims=[16, 32, 32, 64], depths=[1, 1, 2, 1],
                   num_heads=[1, 2, 2, 4])),
    'LaViT':
    dict(arch=dict(_PVT['arch'], depths=[1, 1, 2, 2], la_start=[0, 0, 2, 2])),
    'LessAttnSwinTransformer':
    dict(arch=dict(embed_dims=16, depths=[1, 2, 3, 2], num_heads=[1, 2, 2, 4],
                   la_start=[0, 2, 3, 2])),
    'LessAttnViT': dict(_VIT, arch=dict(_VIT['arch'], la_start=2)),
    'MSFSwinTransformer':
    dict(arch=dict(embed_dims=16, depths=[1, 1, 2, 2],
                   num_heads=[1, 2, 2, 4])),
    'MSFViT': _VIT,
}


def build_tiny(name: str) -> torch.nn.Module:
    init_default_scope('mmdet')
    torch.manual_seed(0)
    return MODELS.build(dict(type=name, **TINY_BACKBONES[name])).eval()
