"""Attention pictures: every family's maps are distributions over the right
key grid, match their definitions, and the tool draws them."""
import pytest
import torch
import torch.nn.functional as F
from mmdet.registry import MODELS

import vitattn_mm  # noqa: F401
from vitattn_mm.registry import ATTENTIONS
from vitattn_tools import attention_maps

# Odd, non-square input (pixels); the query near the top-right corner.
SIZE = (72, 104)
POINT = (97.0, 5.0)


def _build(cfg):
    torch.manual_seed(0)
    return MODELS.build(cfg).eval()


def _image():
    return torch.randn(1, 3, *SIZE, generator=torch.Generator().manual_seed(0))


def _check(maps, key_grids):
    assert [tuple(m.weights.shape) for m in maps] == key_grids
    for amap in maps:
        assert torch.isfinite(amap.weights).all()
        assert (amap.weights >= 0).all()
        assert amap.weights.sum().item() == pytest.approx(1, abs=1e-5)


def test_flatten_maps_match_the_explicit_focused_form():
    model = _build(dict(type='FLattenSwinTransformer', pretrain_img_size=64,
                        arch=dict(embed_dims=16, depths=[1, 1, 1, 1],
                                  num_heads=[2, 2, 2, 2])))
    maps = attention_maps.flatten_maps(model, _image(), POINT, head=1)
    grid = (18, 26)  # ceil(72 / 4), ceil(104 / 4)
    _check(maps, [grid] * 3)
    assert maps[0].query == (1, 24)

    # Explicit form: the query's row of phi(Q) phi(K)^T for head 1, from a
    # hand-computed focusing function and the module's q / kv projections.
    attn = model.stages[0].blocks[0].attn
    tokens = {}
    attn.register_forward_pre_hook(lambda m, a: tokens.update(x=a[0]))
    with torch.no_grad():
        model(_image())
        x = tokens['x']
        q = attn.q(x)
        k = attn.kv(x).chunk(2, -1)[0] + attn.positional_encoding(grid)

        def phi(t):
            t = (F.relu(t) + 1e-6) / F.softplus(attn.scale)
            return t**3 * t.norm(dim=-1, keepdim=True) / (t**3).norm(
                dim=-1, keepdim=True)

        qh, kh = phi(q)[0, :, 8:], phi(k)[0, :, 8:]
        row = kh @ qh[1 * 26 + 24]
    torch.testing.assert_close(maps[0].weights.reshape(-1), row / row.sum(),
                               rtol=1e-5, atol=1e-7)
    # Window softmax covers exactly the query's 7x7 window (rows 0-6,
    # columns 21-25 of a 26-wide map).
    support = maps[2].weights > 0
    assert support.sum() == 7 * 5 and support[:7, 21:].all()


def test_l2vit_maps_and_lcm_concentrates_influence():
    model = _build(dict(type='L2ViT', arch=dict(
        embed_dims=[16, 32, 64, 128], depths=[2, 2, 2, 2],
        num_heads=[1, 1, 2, 4])))
    maps = attention_maps.l2vit_maps(model, _image(), POINT)
    _check(maps, [(18, 26)] * 3)
    # The LCM's two 7x7 depthwise convs spread the query's output over its
    # 13x13 neighbourhood: influence there grows with the LCM.
    r, c = maps[0].query
    near = (slice(max(r - 6, 0), r + 7), slice(max(c - 6, 0), c + 7))
    without, with_lcm = maps[1].weights, maps[2].weights
    assert with_lcm[near].sum() > 0.5
    off_query = with_lcm[near].sum() - with_lcm[r, c]
    assert off_query > without[near].sum() - without[r, c]
    with pytest.raises(ValueError, match='local window attention'):
        attention_maps.l2vit_maps(model, _image(), POINT, block=0)


def test_msf_maps_gaussian_is_softmax_of_negative_distance():
    model = _build(dict(type='MSFViT', arch=dict(embed_dims=32, depth=2,
                                                 num_heads=2)))
    maps = attention_maps.msf_maps(model, _image(), POINT, head=0)
    _check(maps, [(5, 7)] * 2)  # ceil(72 / 16), ceil(104 / 16)

    attn = model.stages[0].blocks[0].attn
    tokens = {}
    attn.register_forward_pre_hook(lambda m, a: tokens.update(x=a[0]))
    with torch.no_grad():
        model(_image())
        q, k = attn.qkv(tokens['x'])[0].split(32, -1)[:2]
        qi = maps[0].query[0] * 7 + maps[0].query[1]
        dist = (q[qi, :16] - k[:, :16]).pow(2).sum(-1)
        expected = (-dist / 2 * 16**-0.5).softmax(-1)
    torch.testing.assert_close(maps[0].weights.reshape(-1), expected)
    assert not torch.allclose(maps[0].weights, maps[1].weights)


def test_lavit_la_map_reuses_the_va_map_until_trained():
    model = _build(dict(type='LaViT', arch='tiny'))
    maps = attention_maps.lavit_maps(model, _image(), POINT)
    # First stage with LA: stage 2 (stride 16, sr 2) -> keys ceil(5/2) x
    # ceil(7/2).
    _check(maps, [(3, 4)] * 2)
    torch.testing.assert_close(maps[0].weights, maps[1].weights)
    stage = maps[0].query_grid
    assert stage == (5, 7)


@pytest.mark.parametrize('name', sorted({
    cls.__name__ for cls in ATTENTIONS.module_dict.values()}))
def test_every_registered_attention_draws_a_distribution(name):
    """The registry drives the tool: each attention's own report of where
    the query looks is a distribution over its key grid (windows, stripes
    and Less-Attention's transformed maps included)."""
    maps = attention_maps.attention_row(name, _image(), POINT)
    own = maps[0]
    assert own.weights.dim() == 2 and own.query_grid == (9, 13)
    assert torch.isfinite(own.weights).all() and (own.weights >= 0).all()
    assert own.weights.sum().item() == pytest.approx(1, abs=1e-4)


def test_cli_draws_every_family(tmp_path):
    import importlib.util

    from PIL import Image
    spec = importlib.util.spec_from_file_location(
        'visualize_attention', 'tools/visualize_attention.py')
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    main = tool.main
    out = tmp_path / 'maps.png'
    main(['--out', str(out), '--size', '96', '96', '--point', '10', '80'])
    with Image.open(out) as img:
        assert img.size[0] > 800 and img.size[1] > 800
    with pytest.raises(SystemExit, match='unknown families'):
        main(['--out', str(out), '--checkpoint', 'vit=x.pth'])
