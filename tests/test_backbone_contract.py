"""The contract every backbone and every attention keeps: the only copy.

Driven by the registries: every registered backbone (at its tiny arch from
``tests/tiny_backbones.py``), and every registered attention in every
wrapper it can enter: each skeleton (placed by the attention's own
``layer_plan``), Swin's windows (any attention) and shifted windows (those
that take Swin's mask, :meth:`WindowedAttention.can_wrap`), and a ViT with a
class token (the grid-free ones). A new attention needs no edit here.
Family test files keep their numerics and official-equivalence tests only.
"""
import math
import pickle

import pytest
import torch
from mmengine.registry import init_default_scope
from torch.nn.modules.batchnorm import _BatchNorm

from tiny_backbones import (SKELETONS, build_tiny, registered_backbones,
                            skeleton_of, tiny_kwargs)
from vitattn_mm.models import backbones
from vitattn_mm.models.attentions import WindowedAttention, accepts
from vitattn_mm.models.backbones import (AttnCSwinTransformer, AttnPVT,
                                         AttnPVTv2, AttnSwinTransformer,
                                         AttnViT, L2ViT)
from vitattn_mm.registry import ATTENTIONS

#: Every registered attention class once (aliases share a class).
ATTENTION_CLASSES = sorted({cls for cls in ATTENTIONS.module_dict.values()},
                           key=lambda cls: cls.__name__)


def _depths(skeleton: type) -> list:
    arch = SKELETONS[skeleton]['arch']
    return arch.get('depths') or [1] * arch['depth']


def _in_skeleton(skeleton: type, attention: type) -> dict:
    """Tiny ``skeleton`` with ``attention`` in every block."""
    kwargs = dict(SKELETONS[skeleton])
    kwargs['attn_cfgs'] = attention.layer_plan(_depths(skeleton))
    if issubclass(skeleton, AttnPVT) and not accepts(attention, 'sr_ratio'):
        kwargs['sr_ratios'] = (1, 1, 1, 1)
    return kwargs


def _in_swin_windows(attention: type, shifted: bool) -> dict:
    """Tiny Swin with ``attention`` in the windows of every block, all
    shifted or none (a stateful plan's layers then share their windows)."""
    plan = attention.layer_plan(_depths(AttnSwinTransformer))
    windows = [[
        dict(cfg, shift=shifted) if cfg['type'] == 'WindowedAttention' else
        dict(cfg, type='WindowedAttention', window_msa=cfg['type'],
             shift=shifted) for cfg in stage
    ] for stage in plan]
    return dict(SKELETONS[AttnSwinTransformer], attn_cfgs=windows)


#: Per wrapper, the attentions that can enter it.
WRAPPERS = {
    **{skeleton.__name__: [a for a in ATTENTION_CLASSES
                           if a is not WindowedAttention]
       for skeleton in SKELETONS},
    'swin-windows': [a for a in ATTENTION_CLASSES
                     if not issubclass(a, WindowedAttention)
                     and WindowedAttention.can_wrap(a, shifted=False)],
    'swin-shifted-windows': [
        a for a in ATTENTION_CLASSES
        if not issubclass(a, WindowedAttention)
        and WindowedAttention.can_wrap(a, shifted=True)],
}

CASES = {
    **{name: (getattr(backbones, name), tiny_kwargs(name))
       for name in registered_backbones()},
    **{f'{skeleton.__name__}/{attention.__name__}': (
        skeleton, _in_skeleton(skeleton, attention))
       for skeleton in SKELETONS
       for attention in WRAPPERS[skeleton.__name__]},
    **{f'swin-windows/{a.__name__}': (AttnSwinTransformer,
                                      _in_swin_windows(a, shifted=False))
       for a in WRAPPERS['swin-windows']},
    **{f'swin-shifted-windows/{a.__name__}': (
        AttnSwinTransformer, _in_swin_windows(a, shifted=True))
       for a in WRAPPERS['swin-shifted-windows']},
}


def test_the_contract_lists_every_attention_in_every_wrapper_it_enters():
    """Every registered attention is in every skeleton and in Swin's plain
    windows; in shifted windows exactly those that take Swin's mask (the
    softmax attentions, MSF's included), and the others are refused by
    name."""
    names = {a.__name__ for a in ATTENTION_CLASSES} - {'WindowedAttention'}
    for skeleton in SKELETONS:
        assert {a.__name__ for a in WRAPPERS[skeleton.__name__]} == names
    assert {a.__name__ for a in WRAPPERS['swin-windows']} == names
    shifted = {a.__name__ for a in WRAPPERS['swin-shifted-windows']}
    assert shifted == {n for n in names
                       if ATTENTIONS.get(n).supports('takes_mask')}
    assert {'MeanShiftAttention', 'WindowMSA', 'MultiheadSelfAttention',
            'SpatialReductionAttention', 'VanillaAttention',
            'LessAttention'} <= shifted
    for name in names - shifted:
        with pytest.raises(ValueError, match='shifted windows'):
            AttnSwinTransformer(**_in_swin_windows(ATTENTIONS.get(name),
                                                   shifted=True))


@pytest.mark.parametrize('name', ['SpatialReductionAttention',
                                  'VanillaAttention', 'LessAttention'])
def test_reduced_keys_are_refused_shifted_windows_by_name(name):
    """Swin's mask pairs a window's tokens; an attention whose keys are
    reduced (``sr_ratio > 1``) cannot take it: refused when built, naming
    the attention and its reduction, not a shape error at the first
    forward. In plain windows it runs, on any map."""
    cls = ATTENTIONS.get(name)
    assert cls.supports('takes_mask')  # with its default sr_ratio=1
    assert not cls.supports('takes_mask', dict(sr_ratio=2))
    assert not WindowedAttention.can_wrap(cls, True, dict(sr_ratio=2))
    with pytest.raises(ValueError, match=f'{name} with sr_ratio=2'):
        WindowedAttention(16, 2, window_size=4, shift=True, window_msa=name,
                          sr_ratio=2)
    if name == 'SpatialReductionAttention':  # stateless: runs on its own
        attn = WindowedAttention(16, 2, window_size=4, window_msa=name,
                                 sr_ratio=2)
        out, _ = attn(torch.randn(2, 7 * 9, 16), (7, 9))
        assert out.shape == (2, 63, 16)


def _build(name, **overrides):
    cls, kwargs = CASES[name]
    torch.manual_seed(0)
    return cls(**{**kwargs, **overrides})


def _grid(model, hw, stage):
    """Stage ``stage``'s token grid for an ``hw`` input, from the layout the
    skeletons document (not from the code under test)."""
    if isinstance(model, AttnViT):
        return tuple(math.ceil(s / 16) for s in hw)
    grid = hw
    for i in range(stage + 1):
        stride = 4 if i == 0 else 2
        # mmdet's PVT drops partial patches; every other layout pads them.
        floor = isinstance(model, AttnPVT) and not isinstance(
            model, AttnPVTv2) and type(model).__name__ == 'AttnPVT'
        grid = tuple(s // stride if floor else math.ceil(s / stride)
                     for s in grid)
    return grid


def _widths(model):
    return model.num_features


@pytest.mark.parametrize('name', registered_backbones())
def test_stochastic_depth_grows_linearly_over_every_block(name):
    """Each stage builds its blocks from its own slice of one linear
    schedule (0 to ``drop_path_rate`` over every block of the network),
    as the stock Swin and PVT do, whatever order stages are built in."""
    from vitattn_mm.models.layers.stage import (drop_path_slices,
                                                linear_drop_path_rates)
    assert drop_path_slices(0.3, [1, 2, 0, 3]) == [
        [0.], [0.06, 0.12], [], [0.18, 0.24, 0.3]
    ] == [linear_drop_path_rates(0.3, 6)[a:b]
          for a, b in ((0, 1), (1, 3), (3, 3), (3, 6))]
    model = build_tiny(name, drop_path_rate=0.2)
    rates = [float(block.drop_path.drop_prob) if hasattr(
        block.drop_path, 'drop_prob') else 0.
        for stage in model.stages for block in stage.blocks]
    assert rates == pytest.approx(linear_drop_path_rates(0.2, len(rates)))


@pytest.mark.parametrize('name', registered_backbones())
def test_stage_specs_describe_what_was_built(name):
    """Each stage is built from its description (``stage_specs``, one
    ``StageSpec`` per stage): as many blocks as it lists, each attention of
    the class its config names with the backend it was given, each block's
    drop-path rate from it; and the least input size read off the specs
    alone is the one the model reports."""
    from vitattn_mm.models.attentions import attention_class
    from vitattn_mm.models.backbones.stage_spec import StageSpec
    model = build_tiny(name, drop_path_rate=0.2, attn_backend='eager')
    assert len(model.stage_specs) == len(model.stages)
    for spec, stage in zip(model.stage_specs, model.stages):
        assert isinstance(spec, StageSpec)
        assert spec.depth == len(stage.blocks)
        for cfg, rate, block in zip(spec.block_cfgs('eager'),
                                    spec.drop_path_rates, stage.blocks):
            assert isinstance(block.attn, attention_class(cfg['type']))
            if 'attn_backend' in cfg:
                assert block.attn.inner.attn_backend == 'eager'
            got = getattr(block.drop_path, 'drop_prob', 0.)
            assert float(got) == pytest.approx(rate)
        for j, block in enumerate(stage.blocks):
            # What the converters read, off the spec: the built attention.
            attn = block.attn
            assert spec.block_attention(j) == (type(attn.inner).__name__,
                                               attn.inner is not attn)
    assert [spec.min_grid() for spec in model.stage_specs] == model.min_grids


@pytest.mark.parametrize('name', registered_backbones())
def test_spec_describes_what_the_constructor_builds_without_building(
        name, monkeypatch):
    """``cls.spec(**kwargs)`` describes ``cls(**kwargs)`` without making a
    module (only the constructor's unbuilt shell): the same stages,
    blocks, attentions, grids, drop-path slices, stem and least input as
    the built model's own description and its layers."""
    init_default_scope('mmdet')
    cls = getattr(backbones, name)
    kwargs = dict(tiny_kwargs(name), drop_path_rate=0.2)
    made = []
    module_init = torch.nn.Module.__init__

    def counting_init(module, *args, **kw):
        made.append(type(module).__name__)
        module_init(module, *args, **kw)

    monkeypatch.setattr(torch.nn.Module, '__init__', counting_init)
    spec = cls.spec(**kwargs)
    assert made == [name]
    monkeypatch.undo()
    model = build_tiny(name, drop_path_rate=0.2)
    assert spec.table() == model.backbone_spec.table()
    assert list(spec.stem) == list(model.backbone_spec.stem)
    assert spec.min_input_size == model.min_input_size
    assert spec.depths == [len(stage.blocks) for stage in model.stages]
    assert spec.out_indices == model.out_indices
    for key, factory in spec.stem.items():
        assert (factory is None) == (getattr(model, key) is None), key
    # The model keeps its description: it still pickles (torch.save of a
    # whole model, EMA copies).
    assert pickle.loads(pickle.dumps(model)).backbone_spec.table() == \
        spec.table()


def test_spec_refuses_what_the_constructor_refuses():
    """Bad arguments raise from the description as from the constructor:
    an unknown arch lists the valid ones, a family refuses ``attn_cfgs``
    by name."""
    from vitattn_mm.models.backbones import FLattenSwinTransformer
    with pytest.raises(KeyError, match='tiny'):
        AttnSwinTransformer.spec(arch='huge')
    with pytest.raises(TypeError, match='attn_cfgs'):
        FLattenSwinTransformer.spec(attn_cfgs=dict(type='WindowMSA'))
    # A package's class describes itself with that package's conventions.
    spec = AttnSwinTransformer.for_package('mmpretrain').spec()
    assert spec.out_indices == (3, )
    assert spec.stages[0].attn_cfgs[0]['pad_small_map'] is False
    spec = FLattenSwinTransformer.spec('tiny', flatten_window_size=56)
    assert spec.block_attention(0, 0) == ('FocusedLinearAttention', True)
    assert spec.block_attention(2, 1) == ('WindowMSA', True)
    assert [s.grid for s in spec.stages] == [(56, 56), (28, 28), (14, 14),
                                             (7, 7)]


def test_a_stage_spec_refuses_what_its_attentions_cannot_take():
    """A setting an attention cannot honour is refused by name when the
    spec is read, before anything is built; a drop-path schedule that does
    not match the blocks is refused."""
    from functools import partial
    from vitattn_mm.models.backbones.stage_spec import StageSpec
    from vitattn_mm.models.layers.blocks import TransformerBlock
    block = partial(TransformerBlock, 16)
    spec = StageSpec(16, 2, (8, 8), [dict(type='WindowMSA', window_size=4)],
                     [0.], block, settings=dict(sr_ratio=2))
    with pytest.raises(ValueError, match='sr_ratio=2 cannot be honoured'):
        spec.block_cfgs()
    with pytest.raises(ValueError, match='2 drop-path rates'):
        StageSpec(16, 2, (8, 8), [dict(type='WindowMSA', window_size=4)],
                  [0., 0.1], block)
    spec = StageSpec(16, 2, (8, 8), [dict(type='SpatialReductionAttention')],
                     [0.], block, settings=dict(sr_ratio=4, attn_drop=0.))
    assert spec.block_cfgs() == [dict(type='SpatialReductionAttention',
                                      sr_ratio=4, attn_drop=0.)]
    assert spec.context == dict(grid_size=(8, 8))
    # The reduction's unpadded 4x4 stride-4 conv needs a whole kernel.
    assert spec.min_grid() == 4


def test_every_registered_backbone_has_a_tiny_arch():
    for name in registered_backbones():
        assert skeleton_of(getattr(backbones, name)) in SKELETONS
        build_tiny(name)


@pytest.mark.parametrize('name', list(CASES))
def test_any_size_round_trip_and_checkpointing(name):
    """Output shapes at the minimum and odd sizes, a clear error below it;
    a strict state-dict round trip computes the same; gradient
    checkpointing changes no gradient; a stateful attention's auxiliary
    loss reaches the task model in training only."""
    model = _build(name, drop_path_rate=0.).eval()
    low = model.min_input_size
    for hw in ((low, low), (71, 90), (low + 1, 3 * low + 30)):
        with torch.no_grad():
            outs = model(torch.randn(1, 3, *hw))
        expected = [(1, _widths(model)[i], *_grid(model, hw, i))
                    for i in model.out_indices]
        assert [tuple(o.shape) for o in outs] == expected, hw
        assert all(torch.isfinite(o).all() for o in outs)
    with pytest.raises(ValueError, match=f'at least {low}x{low}'):
        model(torch.randn(1, 3, low - 1, 2 * low))

    torch.manual_seed(1)
    other = _build(name, drop_path_rate=0.).eval()
    other.load_state_dict(model.state_dict(), strict=True)
    x = torch.randn(2, 3, 50, 70)
    with torch.no_grad():
        for a, b in zip(model(x), other(x)):
            assert torch.equal(a, b)
    assert model.pop_aux_losses() == {}

    ckpt = _build(name, drop_path_rate=0., with_cp=True)
    ckpt.load_state_dict(model.state_dict())
    grads, losses = [], []
    for m in (model.train(), ckpt.train()):
        sum(o.square().mean() for o in m(x)).backward()
        grads.append({k: p.grad for k, p in m.named_parameters()})
        losses.append(m.pop_aux_losses())
    for key, grad in grads[0].items():
        assert (grad is None) == (grads[1][key] is None), key
        if grad is not None:
            torch.testing.assert_close(grad, grads[1][key], atol=1e-6,
                                       rtol=1e-5)
    assert losses[0].keys() == losses[1].keys()
    stateful_la = any(type(m).__name__ == 'LessAttention'
                      and m.dp_loss_weight > 0 for m in model.modules())
    assert ('loss_dp' in losses[0]) == stateful_la
    for key in losses[0]:
        torch.testing.assert_close(losses[0][key], losses[1][key])


def _is_stem(name: str) -> bool:
    """The one stem layout: every parameter before the first stage (not in
    ``stages``, not an output or final norm) is the stem's."""
    return not name.startswith('stages.') and not (
        name.startswith(('norm', 'ln1.', 'ln2.')) and
        (name[:2] == 'ln' or name[4].isdigit()))


@pytest.mark.parametrize('name', registered_backbones())
def test_frozen_stages_norm_eval_and_train(name):
    """``frozen_stages=k`` freezes the stem and stages ``0..k-1`` with their
    output norms (mmdet's count; a plain ViT freezes nothing at 0, as
    mmpretrain's), ``k = num_stages`` everything; ``norm_eval`` keeps
    BatchNorm in eval mode; ``train()`` returns the module."""
    num_stages = _build(name).num_stages
    for k in range(-1, num_stages + 1):
        model = _build(name, frozen_stages=k, norm_eval=True)
        assert model.train() is model
        frozen = {n for n, p in model.named_parameters()
                  if not p.requires_grad}
        expected = set()
        for n, _ in model.named_parameters():
            stage = next((i for i in range(k)
                          if n.startswith((f'stages.{i}.', f'norm{i}.'))),
                         None)
            stem = _is_stem(n) and (
                k > 0 or (k == 0 and not isinstance(model, AttnViT)))
            final = k == num_stages
            if stage is not None or stem or final:
                expected.add(n)
        assert frozen == expected, (k, sorted(frozen ^ expected)[:6])
        assert all(not model.stages[i].training for i in range(max(k, 0)))
        assert all(not m.training for m in model.modules()
                   if isinstance(m, _BatchNorm))
    with pytest.raises(ValueError, match='frozen_stages'):
        _build(name, frozen_stages=num_stages + 1)


@pytest.mark.parametrize('name', registered_backbones())
def test_out_indices_select_outputs_and_their_norms(name):
    last = _build(name).num_stages - 1
    model = _build(name, out_indices=(1, -1)).eval()
    assert model.out_indices == (1, last)
    with torch.no_grad():
        outs = model(torch.randn(1, 3, 64, 64))
    assert len(outs) == 2
    def output_norms(m):
        return {n.split('.')[0] for n, _ in m.named_parameters()
                if n.startswith('norm') and n[4].isdigit()}

    # A skeleton with output norms has exactly those of the outputs; one
    # without (PVT, mmdet's layout; a ViT with a final norm) has none.
    has_norms = bool(output_norms(_build(name)))
    assert output_norms(model) == ({'norm1', f'norm{last}'}
                                   if has_norms else set())
    with pytest.raises(ValueError, match='out_indices'):
        _build(name, out_indices=(last + 1, ))
    with pytest.raises(TypeError, match='out_indices'):
        _build(name, out_indices='last')


@pytest.mark.parametrize('name', registered_backbones())
def test_bad_arguments_raise_naming_them(name):
    with pytest.raises(KeyError, match='Valid arch names'):
        _build(name, arch='no-such-arch')
    with pytest.raises(TypeError, match='frozen_stages'):
        _build(name, frozen_stages=1.5)
    with pytest.raises(TypeError, match='with_cp'):
        _build(name, with_cp='yes')
    with pytest.raises(TypeError, match='pretrained must be a str'):
        _build(name, pretrained=123)


@pytest.mark.parametrize('attention', ATTENTION_CLASSES,
                         ids=lambda cls: cls.__name__)
def test_class_token_needs_a_grid_free_attention(attention):
    """A ViT with a class token runs every attention that is grid-free as
    configured (the class token is one more token) and refuses the others
    by name."""
    kwargs = dict(_in_skeleton(AttnViT, attention), with_cls_token=True,
                  out_type='cls_token')
    grid_free = all(ATTENTIONS.get(cfg['type']).supports('grid_free', cfg)
                    for cfg, in kwargs['attn_cfgs'])
    if not grid_free:
        with pytest.raises(ValueError, match='with_cls_token'):
            AttnViT(**kwargs)
        return
    model = AttnViT(**kwargs).eval()
    with torch.no_grad():
        out = model(torch.randn(2, 3, 45, 61))
    assert [tuple(o.shape) for o in out] == [(2, 32)] * 3


@pytest.mark.parametrize('name', [
    n for n in registered_backbones()
    if skeleton_of(getattr(backbones, n)) is AttnViT
])
def test_vit_backbones_take_a_class_token_or_refuse_it_by_name(name):
    """As mmseg's ViT configs ask (``with_cls_token=True``), whatever the
    family's position embedding."""
    try:
        model = _build(name, with_cls_token=True, out_type='cls_token')
    except ValueError as error:
        assert 'with_cls_token' in str(error)
        return
    with torch.no_grad():
        out = model.eval()(torch.randn(2, 3, 45, 61))
    assert [tuple(o.shape) for o in out] == \
        [(2, model.embed_dims)] * len(model.out_indices)


@pytest.mark.slow
@pytest.mark.parametrize('name', registered_backbones())
def test_bf16_autocast_at_detection_resolution_is_finite(name):
    model = _build(name).train()
    x = torch.randn(1, 3, 512, 640) * 100
    with torch.autocast('cpu', dtype=torch.bfloat16):
        outs = model(x)
    sum(o.float().mean() for o in outs).backward()
    assert all(torch.isfinite(o.float()).all() for o in outs)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters()
               if p.grad is not None)


def test_every_skeleton_is_in_the_catalogue():
    skeletons = {AttnSwinTransformer, AttnPVT, AttnPVTv2, AttnViT,
                 AttnCSwinTransformer, L2ViT}
    assert set(SKELETONS) == skeletons


FAMILIES = [name for name in registered_backbones()
            if not name.startswith('Attn') and name != 'L2ViT']


@pytest.mark.parametrize('name', FAMILIES)
def test_every_family_refuses_attn_cfgs_by_name(name):
    """One rule for every family: its attentions come from its own
    keywords; ``attn_cfgs`` (which would replace them) is refused, naming
    the skeleton that takes it."""
    cls = getattr(backbones, name)
    skeleton = next(c for c in cls.__mro__[1:] if c.__name__.startswith(
        'Attn'))
    with pytest.raises(TypeError, match=rf'{name} builds its attentions .* '
                       rf'give attn_cfgs to {skeleton.__name__}'):
        build_tiny(name, attn_cfgs=dict(type='MultiheadSelfAttention'))


@pytest.mark.parametrize('name', ['AttnSwinTransformer', 'AttnViT',
                                  'LessAttnViT', 'MSFViT'])
def test_img_size_and_pretrain_img_size_are_one_setting(name):
    """Either name is taken, the same size under both too; two different
    sizes are refused, naming both (one rule for every skeleton)."""
    for kwargs in (dict(img_size=64), dict(pretrain_img_size=64),
                   dict(img_size=64, pretrain_img_size=64)):
        build_tiny(name, **kwargs)
    with pytest.raises(ValueError, match='img_size=64 and pretrain_img_size'
                       '=96: both name the pretraining input size'):
        build_tiny(name, img_size=64, pretrain_img_size=96)
