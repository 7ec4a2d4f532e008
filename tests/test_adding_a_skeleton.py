"""The worked example of docs/adding_a_skeleton.md, run from the page: a
new skeleton described stage by stage builds with any attention, at any
input size, and the base class gives it freezing, the input-size check
and strict weight loading."""
import pytest
import torch
from mmdet.registry import MODELS

from vitattn_mm.registry import downstream_model_registries

GUIDE = 'docs/adding_a_skeleton.md'


@pytest.fixture(scope='module')
def toy_pyramid():
    """The guide's skeleton, registered for these tests, unregistered
    after."""
    with open(GUIDE) as f:
        code = f.read().split('```python\n')[1].split('```')[0]
    namespace = {}
    exec(compile(code, GUIDE, 'exec'), namespace)
    yield namespace['ToyPyramid']
    for _, registry in downstream_model_registries():
        registry._module_dict.pop('ToyPyramid')


@pytest.mark.parametrize('attn_cfgs', [
    None,
    dict(type='FocusedLinearAttention'),
    [None, dict(type='MeanShiftAttention'),
     dict(type='SpatialReductionAttention', sr_ratio=2)],
])
def test_the_guides_skeleton_takes_any_attention(toy_pyramid, attn_cfgs):
    torch.manual_seed(0)
    model = MODELS.build(dict(type='ToyPyramid', attn_cfgs=attn_cfgs))
    x = torch.randn(2, 3, 67, 90)
    outs = model(x)
    assert [tuple(o.shape) for o in outs] == [
        (2, 32, 17, 23), (2, 64, 9, 12), (2, 128, 5, 6)]
    other = toy_pyramid(attn_cfgs=attn_cfgs)
    other.load_state_dict(model.state_dict(), strict=True)
    model.eval(), other.eval()
    with torch.no_grad():
        assert all(torch.equal(a, b) for a, b in zip(model(x), other(x)))
    # The input-size check follows the attentions the specs describe.
    need = model.min_input_size
    assert need == (17 if isinstance(attn_cfgs, list) else 1)
    # And the description says so without building the network.
    assert toy_pyramid.spec(attn_cfgs=attn_cfgs).min_input_size == need
    if need > 1:
        with pytest.raises(ValueError, match=f'at least {need}x{need}'):
            model(torch.randn(1, 3, need - 1, 64))


def test_the_guides_skeleton_freezes_and_refuses_bad_archs(toy_pyramid):
    model = toy_pyramid(frozen_stages=1).train()
    frozen = {name for name, p in model.named_parameters()
              if not p.requires_grad}
    assert frozen and all(name.startswith(('patch_embed.', 'stages.0.',
                                           'norm0.')) for name in frozen)
    assert any(name.startswith('stages.0.') for name in frozen)
    with pytest.raises(Exception, match='tiny'):
        toy_pyramid(arch='huge')
