"""The contract every backbone keeps, for every (skeleton, attention) pair.

One parametrised suite instead of per-family copies: each registered
attention in each skeleton it fits, and each family's registered backbone,
at small widths. A new attention registered without a place here fails
:func:`test_every_registered_attention_is_in_the_contract`.
"""
import math

import pytest
import torch
from torch.nn.modules.batchnorm import _BatchNorm

from vitattn_mm.models.backbones import (AttnCSwinTransformer, AttnPVT,
                                         AttnPVTv2, AttnSwinTransformer,
                                         AttnViT, FLattenCSwinTransformer,
                                         FLattenDeiT, FLattenPVT, FLattenPVTv2,
                                         FLattenSwinTransformer, L2ViT, LaViT,
                                         LessAttnSwinTransformer, LessAttnViT,
                                         MSFSwinTransformer, MSFViT)
from vitattn_mm.registry import ATTENTIONS

SWIN = dict(embed_dims=16, depths=[1, 1, 2, 1], num_heads=[1, 2, 2, 4])
PVT = dict(embed_dims=[16, 32, 32, 64], depths=[1, 1, 1, 1],
           num_heads=[1, 1, 2, 2], mlp_ratios=[2, 2, 2, 2])
VIT = dict(embed_dims=32, depth=3, num_heads=2)
#: Even heads: CSwin splits them between horizontal and vertical stripes.
CSWIN = dict(embed_dims=16, depths=[1, 1, 2, 1], num_heads=[2, 2, 4, 4])
L2 = dict(embed_dims=[16, 32, 32, 64], depths=[2, 2, 2, 2],
          num_heads=[1, 1, 2, 2])
LA = dict(embed_dims=[16, 32, 32, 64], depths=[1, 2, 3, 2],
          num_heads=[1, 1, 2, 2], mlp_ratios=[2, 2, 2, 2],
          la_start=[0, 2, 2, 2])

#: Token attentions (``forward(x, hw_shape)``) and their extra arguments.
TOKEN_ATTENTIONS = {
    'FocusedLinearAttention': {},
    'MeanShiftAttention': {},
    'LinearGlobalAttention': {},
    # The other skeletons' small archs have single-head stages, which
    # stripes cannot split: the whole-map variant there, the stripes in
    # the CSwin skeleton's own cases.
    'CrossShapedWindowAttention': dict(split_size=None),
}
#: Window attentions, run by Swin's ShiftWindowMSA.
WINDOW_ATTENTIONS = ('WindowMSA', 'MeanShiftAttention', 'LocalWindowAttention')
#: Attentions that pass state between layers: run by the Less-Attention
#: backbones (LaViT on PVT, LessAttnViT, LessAttnSwinTransformer).
STATEFUL_ATTENTIONS = ('VanillaAttention', 'LessAttention',
                       'WindowVanillaAttention', 'WindowLessAttention')


def _token(name):
    return dict(type=name, **TOKEN_ATTENTIONS[name])


CASES = {
    # Swin skeleton: every window attention, every token attention.
    **{f'swin/{name}': (AttnSwinTransformer, dict(
        arch=SWIN, attn_cfgs=dict(type='ShiftWindowMSA', window_msa=name)))
       for name in WINDOW_ATTENTIONS},
    **{f'swin/{name}': (AttnSwinTransformer, dict(
        arch=SWIN, attn_cfgs=[_token(name)] * 2 + [None] * 2))
       for name in TOKEN_ATTENTIONS},
    # PVT / PVTv2 and ViT skeletons: every token attention.
    **{f'pvt/{name}': (AttnPVT, dict(arch=PVT, attn_cfgs=_token(name)))
       for name in TOKEN_ATTENTIONS},
    **{f'pvtv2/{name}': (AttnPVTv2, dict(arch=PVT, attn_cfgs=_token(name)))
       for name in TOKEN_ATTENTIONS},
    **{f'vit/{name}': (AttnViT, dict(arch=VIT, attn_cfgs=_token(name),
                                     out_indices=(0, 1, 2)))
       for name in TOKEN_ATTENTIONS},
    # CSwin skeleton: its own cross-shaped windows (the default), and every
    # other token attention in its first two stages.
    'AttnCSwinTransformer': (AttnCSwinTransformer, dict(arch=CSWIN)),
    **{f'cswin/{name}': (AttnCSwinTransformer, dict(
        arch=CSWIN, attn_cfgs=[_token(name)] * 2 + [None] * 2))
       for name in TOKEN_ATTENTIONS if name != 'CrossShapedWindowAttention'},
    # The families' registered backbones.
    'FLattenSwinTransformer': (FLattenSwinTransformer, dict(arch=SWIN)),
    'FLattenPVT': (FLattenPVT, dict(arch=PVT)),
    'FLattenPVTv2': (FLattenPVTv2, dict(arch=PVT)),
    'FLattenCSwinTransformer': (FLattenCSwinTransformer, dict(arch=CSWIN)),
    'FLattenDeiT': (FLattenDeiT, dict(arch=VIT, out_indices=(0, 1, 2))),
    'MSFSwinTransformer': (MSFSwinTransformer, dict(arch=SWIN, groups=2)),
    'MSFViT': (MSFViT, dict(arch=VIT, out_indices=(0, 1, 2))),
    'L2ViT': (L2ViT, dict(arch=L2)),
    'LaViT': (LaViT, dict(arch=LA)),
    'LessAttnViT': (LessAttnViT, dict(arch=dict(VIT, la_start=2),
                                      out_indices=(0, 1, 2))),
    'LessAttnSwinTransformer': (LessAttnSwinTransformer, dict(
        arch=dict(SWIN, depths=[1, 2, 3, 2], la_start=[0, 2, 3, 2]))),
}


def _build(name, **kwargs):
    cls, base = CASES[name]
    torch.manual_seed(0)
    return cls(**{**base, **kwargs})


def _num_stages(model):
    return len(model.blocks) if hasattr(model, 'blocks') else len(
        model.stages)


def _stage_modules(model, i):
    """What ``frozen_stages >= i`` must freeze of stage ``i``."""
    if hasattr(model, 'blocks'):  # ViT: a stage is a block
        return [model.blocks[i]]
    modules = [model.stages[i]]
    if hasattr(model, 'downsample_layers'):  # L2ViT: its stem / merging
        modules.append(model.downsample_layers[i])
    return modules


def _widths(model):
    return model.num_features if hasattr(model, 'num_features') else (
        [model.embed_dims] * len(model.out_indices)
        if isinstance(model.embed_dims, int) else model.embed_dims)


def _expected_shapes(model, hw):
    if hasattr(model, 'blocks'):
        patch = model.min_input_size
        grid = [math.ceil(s / patch) for s in hw]
        return [(1, model.embed_dims, *grid)] * len(model.out_indices)
    shapes = []
    for i, width in enumerate(_widths(model)):
        stride = 4 * 2**i
        if i in model.out_indices:
            shapes.append(
                (1, width, *(math.ceil(s / stride) for s in hw)))
    return shapes


def test_every_registered_attention_is_in_the_contract():
    covered = (set(TOKEN_ATTENTIONS) | set(WINDOW_ATTENTIONS)
               | set(STATEFUL_ATTENTIONS))
    assert set(ATTENTIONS.module_dict) == covered


@pytest.mark.parametrize('name', list(CASES))
def test_any_size_above_the_minimum_and_a_clear_error_below(name):
    model = _build(name).eval()
    low = model.min_input_size
    for hw in ((low, low), (71, 90), (low + 1, 3 * low - 1)):
        with torch.no_grad():
            outs = model(torch.randn(1, 3, *hw))
        assert [tuple(o.shape) for o in outs] == _expected_shapes(model, hw)
        assert all(torch.isfinite(o).all() for o in outs)
    with pytest.raises(ValueError, match=f'at least {low}x{low}'):
        model(torch.randn(1, 3, low - 1, 2 * low))


@pytest.mark.parametrize('name', list(CASES))
def test_out_indices_select_outputs_and_their_norms(name):
    last = _num_stages(_build(name)) - 1
    model = _build(name, out_indices=(1, -1)).eval()
    assert model.out_indices == (1, last)
    with torch.no_grad():
        outs = model(torch.randn(1, 3, 64, 64))
    assert len(outs) == 2
    norms = {n.split('.')[0] for n, _ in model.named_parameters()
             if n.startswith('norm') and n[4].isdigit()}
    assert norms <= {'norm1', f'norm{last}'}


@pytest.mark.parametrize('name', list(CASES))
def test_frozen_stages_train_and_norm_eval(name):
    model = _build(name, frozen_stages=1, norm_eval=True)
    assert model.train() is model
    for i in (0, 1):
        for module in _stage_modules(model, i):
            assert not module.training
            assert not any(p.requires_grad for p in module.parameters())
    for module in _stage_modules(model, 2):
        assert all(p.requires_grad for p in module.parameters())
    assert all(not m.training for m in model.modules()
               if isinstance(m, _BatchNorm))
    assert model.eval() is model


@pytest.mark.parametrize('name', list(CASES))
def test_gradient_checkpointing_changes_nothing(name):
    plain = _build(name, drop_path_rate=0.).train()
    ckpt = _build(name, drop_path_rate=0., with_cp=True).train()
    ckpt.load_state_dict(plain.state_dict())
    x = torch.randn(2, 3, 64, 72)
    for model in (plain, ckpt):
        for o in model(x):
            o.square().mean().backward(retain_graph=True)
    for (key, a), b in zip(plain.named_parameters(), ckpt.parameters()):
        assert (a.grad is None) == (b.grad is None), key
        if a.grad is not None:
            torch.testing.assert_close(a.grad, b.grad, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize('name', list(CASES))
def test_state_dict_round_trip(name):
    model = _build(name).eval()
    torch.manual_seed(1)
    other = type(model)(**CASES[name][1]).eval()
    other.load_state_dict(model.state_dict(), strict=True)
    x = torch.randn(1, 3, 50, 70)
    with torch.no_grad():
        for a, b in zip(model(x), other(x)):
            assert torch.equal(a, b)


@pytest.mark.slow
@pytest.mark.parametrize('name', list(CASES))
def test_bf16_autocast_at_detection_resolution_is_finite(name):
    model = _build(name).train()
    x = torch.randn(1, 3, 512, 640) * 100
    with torch.autocast('cpu', dtype=torch.bfloat16):
        outs = model(x)
    sum(o.float().mean() for o in outs).backward()
    assert all(torch.isfinite(o.float()).all() for o in outs)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters()
               if p.grad is not None)
