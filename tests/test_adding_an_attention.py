"""The worked example of docs/adding_an_attention.md, run from the page: a
new attention in one file plugs into every skeleton, its configs build, and
the registry-driven tools (attention maps, benchmark presets) take it with
no list edited."""
import json

import pytest
import torch
from mmengine.registry import MODELS, init_default_scope

from tiny_backbones import SKELETONS
from vitattn_mm.models.backbones import AttnPVT
from vitattn_mm.registry import ATTENTIONS

GUIDE = 'docs/adding_an_attention.md'


def _code_blocks():
    with open(GUIDE) as f:
        return [block.split('```')[0]
                for block in f.read().split('```python\n')[1:]]


@pytest.fixture
def cosine_attention():
    """The guide's attention, registered for the test, unregistered after."""
    namespace = {}
    exec(compile(_code_blocks()[0], GUIDE, 'exec'), namespace)
    yield namespace['CosineAttention']
    ATTENTIONS._module_dict.pop('CosineAttention')


def test_the_guides_attention_plugs_into_every_skeleton(cosine_attention):
    for skeleton, kwargs in SKELETONS.items():
        arch = kwargs['arch']
        depths = arch.get('depths') or [1] * arch['depth']
        # PVT's stages reduce keys by default; this attention does not.
        extra = dict(sr_ratios=(1, 1, 1, 1)) if issubclass(
            skeleton, AttnPVT) else {}
        torch.manual_seed(0)
        model = skeleton(**kwargs, **extra,
                         attn_cfgs=cosine_attention.layer_plan(depths))
        model.eval()
        attns = [b.attn for s in model.stages for b in s.blocks]
        assert all(isinstance(a, cosine_attention) for a in attns)
        other = skeleton(**kwargs, **extra,
                         attn_cfgs=cosine_attention.layer_plan(depths))
        other.load_state_dict(model.state_dict(), strict=True)
        x = torch.randn(2, 3, 71, 90)
        with torch.no_grad():
            for a, b in zip(model(x), other.eval()(x)):
                assert torch.isfinite(a).all() and torch.equal(a, b)


def test_the_guides_configs_build(cosine_attention):
    namespace = {}
    exec(compile(_code_blocks()[1], GUIDE, 'exec'), namespace)
    init_default_scope('mmdet')
    with torch.device('meta'):
        for name in ('swin_backbone', 'pvtv2_backbone', 'deit_backbone'):
            model = MODELS.build(namespace[name])
            assert any(isinstance(m, cosine_attention)
                       for m in model.modules())
    # The class token: the guide's attention is grid-free.
    model = MODELS.build(dict(namespace['deit_backbone'], arch=dict(
        embed_dims=32, depth=2, num_heads=2))).eval()
    assert model.with_cls_token
    with torch.no_grad():
        assert model(torch.randn(1, 3, 48, 64))[0].shape == (1, 32)


def test_the_tools_take_it_with_no_list_edited(cosine_attention, tmp_path):
    from vitattn_tools import attention_maps
    from vitattn_tools.benchmark import build_backbone
    image = torch.randn(1, 3, 64, 64)
    maps = attention_maps.attention_row('CosineAttention', image, (40, 30))
    assert maps[0].title == 'CosineAttention'
    torch.testing.assert_close(maps[0].weights.sum(), torch.tensor(1.))
    assert not torch.allclose(maps[0].weights, maps[1].weights)

    label, model = build_backbone('CosineAttention')
    assert isinstance(model.stages[2].blocks[5].attn, cosine_attention)

    import importlib.util
    spec = importlib.util.spec_from_file_location(
        'visualize_attention', 'tools/visualize_attention.py')
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    out = tmp_path / 'maps.png'
    tool.main(['--families', '--attentions', 'CosineAttention', '--size',
               '64', '64', '--out', str(out), '--layer',
               'stages.0.blocks.0.attn', '--backbone', json.dumps(dict(
                   type='AttnViT', arch=dict(embed_dims=32, depth=2,
                                             num_heads=2),
                   attn_cfgs=dict(type='CosineAttention')))])
    assert out.stat().st_size > 0
