"""FLatten: focused linear attention and the FLatten-Swin / PVT / PVTv2 /
DeiT backbones (numerics, shapes, official checkpoints, converter, bf16)."""
import math
import re
import runpy
import sys

import pytest
import torch
import torch.nn.functional as F

from tiny_backbones import ARCHS, build_tiny
from vitattn_mm.models.attentions import FocusedLinearAttention
from vitattn_mm.ops import focused_linear_attention_eager
from vitattn_mm.models.backbones.flatten import (FLattenDeiT, FLattenPVT,
                                                 FLattenPVTv2,
                                                 FLattenSwinTransformer)

# Small widths (stage widths 16-128 for Swin: the positional encodings'
# shapes below), two blocks in the middle stages.
TINY_SWIN = ARCHS['swin-1221']
TINY_PVT = ARCHS['pvt-1221']


# ---------------------------------------------------------------- attention
def _reference_attention(attn, x, hw):
    """The released formulation with an explicit N x n attention matrix,
    in float64, from the module's weights only."""
    p = {k: v.double() for k, v in attn.state_dict().items()}
    x = x.double()
    B, N, C = x.shape
    heads, d = attn.num_heads, C // attn.num_heads
    q = F.linear(x, p['q.weight'], p['q.bias'])
    if attn.sr_ratio > 1:
        grid = x.transpose(1, 2).reshape(B, C, *hw)
        grid = F.conv2d(grid, p['sr.weight'], p['sr.bias'],
                        stride=attn.sr_ratio)
        kv_hw = grid.shape[-2:]
        kv_in = F.layer_norm(grid.flatten(2).transpose(1, 2), (C, ),
                             p['norm.weight'], p['norm.bias'])
    else:
        kv_hw, kv_in = hw, x
    kv = F.linear(kv_in, p['kv.weight'], p['kv.bias'])
    k, v = kv[..., :C], kv[..., C:]
    pos = p['positional_encoding.weight']
    grid_hw = attn.positional_encoding.grid_hw
    pos = F.interpolate(
        pos.reshape(1, *grid_hw, C).permute(0, 3, 1, 2), size=tuple(kv_hw),
        mode='bilinear', align_corners=False).flatten(2).transpose(1, 2)
    k = k + pos  # keys only

    def phi(t):  # ReLU + eps, / softplus(scale), focusing over all C
        t = (F.relu(t) + 1e-6) / F.softplus(p['scale'])
        t3 = t**3
        return t3 / t3.norm(dim=-1, keepdim=True) * t.norm(
            dim=-1, keepdim=True)

    q, k = phi(q), phi(k)
    n = k.shape[1]
    out = torch.empty(B, N, C, dtype=torch.float64)
    v_grid = v.transpose(1, 2).reshape(B, C, *kv_hw)
    if attn.sr_ratio > 1:
        v_grid = F.interpolate(v_grid, size=hw, mode='bilinear',
                               align_corners=False)
    for h in range(heads):
        sl = slice(h * d, (h + 1) * d)
        sim = q[..., sl] @ k[..., sl].transpose(1, 2)  # (B, N, n)
        # Row-normalised; the 1e-6 of the official z = 1/(q.mean(k)+1e-6)
        # becomes n * 1e-6 on the row sum.
        weights = sim / (sim.sum(-1, keepdim=True) + n * 1e-6)
        local = F.conv2d(v_grid[:, sl], p['dwc.weight'], p['dwc.bias'],
                         padding=p['dwc.weight'].shape[-1] // 2, groups=d)
        out[..., sl] = weights @ v[..., sl] + local.flatten(2).transpose(1, 2)
    return F.linear(out, p['proj.weight'], p['proj.bias'])


def _randomised_attention(sr_ratio=1, grid=(6, 9)):
    torch.manual_seed(0)
    attn = FocusedLinearAttention(
        64, 4, grid_size=grid, sr_ratio=sr_ratio).eval()
    with torch.no_grad():  # zero-initialised in the official code
        attn.scale.normal_(0, 1)
        attn.positional_encoding.weight.normal_(0, 0.5)
    return attn


@pytest.mark.parametrize('sr_ratio, hw', [(1, (6, 9)), (1, (7, 11)),
                                          (2, (8, 10))])
def test_linear_order_equals_explicit_attention_matrix(sr_ratio, hw):
    attn = _randomised_attention(sr_ratio)
    x = torch.randn(2, hw[0] * hw[1], 64)
    with torch.no_grad():
        ours, state = attn(x, hw)
    assert state is None
    ref = _reference_attention(attn, x, hw)
    assert (ours.double() - ref).abs().max() < 1e-5


def test_attention_weights_are_a_distribution():
    """With v = identity the linear form returns its attention matrix:
    non-negative rows summing to 1 (up to the 1e-6 guard)."""
    torch.manual_seed(0)
    attn = FocusedLinearAttention(64, 1, grid_size=(8, 8))
    q, k = torch.randn(2, 64, 64), torch.randn(2, 64, 64)
    kv = torch.cat([k, torch.eye(64).expand(2, 64, 64)], dim=-1)
    no_conv = torch.zeros(64, 1, 5, 5), torch.zeros(64)
    with torch.no_grad():
        weights = focused_linear_attention_eager(
            q, kv, None, F.softplus(attn.scale), None, *no_conv, (8, 8), 1,
            3.)
    assert (weights >= 0).all()
    assert torch.allclose(weights.sum(-1), torch.ones(2, 64), atol=1e-5)


@pytest.mark.parametrize('keys', [30, 63])
def test_normaliser_routes_agree(keys):
    """The normaliser comes out of the queries' one product with the state
    ``[k^T v, sum(k)]``: from the keys' sum where the values are fp32
    already, from a column of ones in the values' cast copy where they are
    not. Both routes give the same output and gradients."""
    torch.manual_seed(0)
    q = torch.randn(2, 63, 16)
    kv = torch.randn(2, keys, 32)
    pos = torch.randn(1, keys, 16)
    s = torch.rand(1, 1, 16) + 0.5
    dwc = torch.randn(8, 1, 5, 5), torch.randn(8)
    v_map = torch.randn(2, 16, 7, 9)
    results = []
    for dtype in (torch.float32, torch.float64):  # sums / ones
        inputs = [t.to(dtype).requires_grad_() for t in (q, kv, pos, s)]
        out = focused_linear_attention_eager(
            *inputs, v_map.to(dtype), *(t.to(dtype) for t in dwc), (7, 9),
            2, 3.)
        results.append((out, *torch.autograd.grad(out.square().sum(),
                                                  inputs)))
    for got, expected in zip(*results):
        torch.testing.assert_close(got, expected.float(), rtol=1e-5,
                                   atol=1e-5 * expected.abs().max().item())


@pytest.mark.parametrize('keys', [30, 63])
def test_joined_route_is_the_separate_one(monkeypatch, keys):
    """The whole eager attention with queries and keys focused and
    multiplied joined (a GPU's route: one focusing call, the products'
    gradients written out, the depthwise conv added in the normalising
    pass) and apart (the CPU's): the same output and gradients of q, kv,
    pos, s, the conv's map and its weights; fp64 (rtol 1e-10), and bf16
    tokens (each route rounds the fp32 sum of the attention and the conv
    once: the output within bf16's tolerance, gradients within 5e-3
    relative)."""
    from vitattn_mm.ops import focusing
    torch.manual_seed(0)
    base = [torch.randn(2, 63, 16), torch.randn(2, keys, 32),
            torch.randn(1, keys, 16), torch.rand(1, 1, 16) + 0.5,
            torch.randn(2, 16, 7, 9), torch.randn(8, 1, 5, 5),
            torch.randn(8)]
    for dtype in (torch.float64, torch.bfloat16):
        # s (index 3) in fp32 at least, as the module passes it
        inputs = [t.to(torch.promote_types(dtype, torch.float32) if i == 3
                       else dtype).requires_grad_()
                  for i, t in enumerate(base)]
        results = []
        for joined in (False, True):
            monkeypatch.setattr(focusing, 'joins_queries_and_keys',
                                lambda _: joined)
            out = focused_linear_attention_eager(*inputs, (7, 9), 2, 3.)
            assert out.dtype == dtype
            results.append((out, *torch.autograd.grad(
                out.float().square().sum(), inputs)))
        for got, expected in zip(*results):
            if dtype == torch.float64:
                torch.testing.assert_close(got, expected, rtol=1e-10,
                                           atol=1e-12)
            elif got is results[1][0]:
                torch.testing.assert_close(got, expected)
            else:
                rel = ((got.float() - expected.float()).norm() /
                       expected.float().norm()).item()
                assert rel < 5e-3, rel


def test_attention_fp16_autocast_stays_finite():
    """x**3 and the norms overflow in fp16: the module computes them in
    fp32 even under fp16 autocast (the GPU AMP case, here on the CPU)."""
    attn = _randomised_attention()
    x = 100 * torch.randn(2, 54, 64)
    with torch.autocast('cpu', dtype=torch.float16):
        out, _ = attn(x, (6, 9))
    assert torch.isfinite(out).all()
    ref, _ = attn(x, (6, 9))
    assert torch.allclose(out.float(), ref, rtol=0.05, atol=0.05 *
                          ref.abs().max().item())


# ---------------------------------------------------------------- backbones
@pytest.fixture(scope='module')
def small_models():
    """Small widths: shapes depend only on the strides."""
    torch.manual_seed(0)
    return {
        'swin': FLattenSwinTransformer(TINY_SWIN).eval(),
        'swin_windowed': FLattenSwinTransformer(
            TINY_SWIN, flatten_window_size=56).eval(),
        'pvt': FLattenPVT(TINY_PVT).eval(),
        'pvtv2': FLattenPVTv2(TINY_PVT).eval(),
    }


def _widths(model):
    """Channels of each stage (mmpretrain's Swin keeps ``embed_dims`` as
    the stem width)."""
    if isinstance(model, FLattenSwinTransformer):
        return model.num_features
    return model.embed_dims


def _expected_shapes(hw, dims):
    h, w = hw
    shapes = []
    for i, dim in enumerate(dims):
        stride = 4 * 2**i
        shapes.append((1, dim, math.ceil(h / stride), math.ceil(w / stride)))
    return shapes


def test_window_mode_at_pretraining_size_is_the_global_model(small_models):
    """At 224 the official 56-window covers stage 1 (56x56) and shrinks to
    stage 2's 28x28 map: window mode equals global mode there (elsewhere it
    pads; see test_any_input_size)."""
    globl, windowed = small_models['swin'], small_models['swin_windowed']
    # The same weights: the FLatten stages' attentions sit in the window
    # wrapper (``attn.w_msa``) in window mode.
    windowed.load_state_dict(
        {re.sub(r'^(stages\.[01]\.blocks\.\d+\.attn\.)', r'\1w_msa.', k): v
         for k, v in globl.state_dict().items()}, strict=True)
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        for a, b in zip(globl(x), windowed(x)):
            assert torch.equal(a, b)
    attn = windowed.stages[1].blocks[0].attn
    assert attn.window_size == (28, 28) and attn.shift_size == 0
    assert attn.w_msa.positional_encoding.weight.shape == (1, 784, 32)


def test_global_mode_resizes_positional_encoding(small_models):
    attn = small_models['swin'].stages[0].blocks[0].attn
    assert attn.positional_encoding.weight.shape == (1, 56 * 56, 16)
    with torch.no_grad():
        resized = attn.positional_encoding((40, 70))
        assert resized.shape == (1, 40 * 70, 16)
        assert torch.equal(attn.positional_encoding((40, 70)), resized)
        # At the pretraining grid: the table itself.
        assert attn.positional_encoding((56, 56)) is \
            attn.positional_encoding.weight


@pytest.mark.parametrize('cls, arch', [(FLattenSwinTransformer, TINY_SWIN),
                                       (FLattenPVT, TINY_PVT),
                                       (FLattenPVTv2, TINY_PVT)])
def test_custom_small_arch_trains_at_demo_size(cls, arch):
    """The README demo's setting: small widths, 160x160, from scratch."""
    torch.manual_seed(0)
    model = cls(arch=arch, drop_path_rate=0.1).train()
    outs = model(torch.randn(2, 3, 160, 160))
    assert [o.shape[1] for o in outs] == _widths(model)
    sum(o.mean() for o in outs).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all()
               for p in model.parameters() if p.requires_grad)


def test_pvt_output_norms():
    """FLatten-PVT adds an output norm per stage (PVT has none between
    stages); PVTv2 closes every stage with one already."""
    raw = FLattenPVT(TINY_PVT, out_indices=(3, ), out_norm=False)
    assert not any('norm' in name and 'blocks' not in name
                   and 'patch_embed' not in name
                   for name, _ in raw.named_parameters())
    with pytest.raises(ValueError, match='out_norm'):
        FLattenPVTv2(TINY_PVT, out_norm=True)


# --------------------------------------------------------------- FLatten-DeiT
TINY_DEIT = ARCHS['vit-3']


def test_flatten_deit_tiny_is_the_papers_model():
    """Supplement Table 2: 12 global FLatten blocks, 192 channels, 3 heads,
    a 14x14 window (the whole 224 map); Table 1: 6.1 M params with the
    1000-class head (ours 6.19 M, docs/flatten.md)."""
    model = FLattenDeiT('tiny')
    blocks = [stage.blocks[0] for stage in model.stages]
    assert len(blocks) == 12 and model.embed_dims == 192
    assert model.patch_resolution == (14, 14)
    assert model.pos_embed.shape == (1, 14 * 14, 192)
    for block in blocks:
        attn = block.attn
        assert isinstance(attn, FocusedLinearAttention)
        assert attn.sr_ratio == 1
        assert (attn.num_heads, attn.head_dims) == (3, 64)
        assert attn.dwc.kernel_size == (5, 5)
        assert attn.positional_encoding.weight.shape == (1, 196, 192)
        assert block.norm1.eps == 1e-6
    params = sum(p.numel() for p in model.parameters()) + 192 * 1000 + 1000
    assert params == 6190888
    assert abs(params / 6.1e6 - 1) < 0.02
    assert FLattenDeiT('t').state_dict().keys() == model.state_dict().keys()


def test_flatten_deit_classifier_output_trains():
    """``out_type='avg_featmap'`` (the ImageNet config): the mean token
    through the last block's norm, ``(B, C)``; gradients reach every
    parameter."""
    torch.manual_seed(0)
    model = FLattenDeiT(TINY_DEIT, out_type='avg_featmap',
                        drop_path_rate=0.1).train()
    (out, ) = model(torch.randn(2, 3, 64, 80))
    assert out.shape == (2, 32)
    out.square().mean().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all()
               for p in model.parameters())


# ------------------------------------------------------ official checkpoints
def _official_swin_state_dict(embed_dims=96, depths=(2, 2, 6, 2),
                              num_heads=(3, 6, 12, 24), img=224, window=7,
                              flatten_stages=2):
    """Names and shapes of a released FLatten-Swin file (random values)."""
    sd = {
        'patch_embed.proj.weight': (embed_dims, 3, 4, 4),
        'patch_embed.proj.bias': (embed_dims, ),
        'patch_embed.norm.weight': (embed_dims, ),
        'patch_embed.norm.bias': (embed_dims, ),
    }
    buffers = {}
    res = img // 4
    for i, depth in enumerate(depths):
        dim, heads = embed_dims * 2**i, num_heads[i]
        for j in range(depth):
            p = f'layers.{i}.blocks.{j}.'
            sd.update({
                p + 'norm1.weight': (dim, ),
                p + 'norm1.bias': (dim, ),
                p + 'attn.qkv.weight': (3 * dim, dim),
                p + 'attn.qkv.bias': (3 * dim, ),
                p + 'attn.proj.weight': (dim, dim),
                p + 'attn.proj.bias': (dim, ),
                p + 'norm2.weight': (dim, ),
                p + 'norm2.bias': (dim, ),
                p + 'mlp.fc1.weight': (4 * dim, dim),
                p + 'mlp.fc1.bias': (4 * dim, ),
                p + 'mlp.fc2.weight': (dim, 4 * dim),
                p + 'mlp.fc2.bias': (dim, ),
            })
            if i < flatten_stages:
                head_dim = dim // heads
                sd.update({
                    p + 'attn.dwc.weight': (head_dim, 1, 5, 5),
                    p + 'attn.dwc.bias': (head_dim, ),
                    p + 'attn.scale': (1, 1, dim),
                    p + 'attn.positional_encoding': (1, res * res, dim),
                })
            else:
                sd[p + 'attn.relative_position_bias_table'] = (
                    (2 * window - 1)**2, heads)
                coords = torch.stack(
                    torch.meshgrid(torch.arange(window), torch.arange(window),
                                   indexing='ij')).flatten(1)
                rel = (coords[:, :, None] - coords[:, None, :]).permute(
                    1, 2, 0) + (window - 1)
                buffers[p + 'attn.relative_position_index'] = (
                    rel[..., 0] * (2 * window - 1) + rel[..., 1])
                if j % 2 == 1 and res > window:
                    buffers[p + 'attn_mask'] = torch.zeros(
                        (res // window)**2, window**2, window**2)
        if i < len(depths) - 1:
            sd.update({
                f'layers.{i}.downsample.reduction.weight': (2 * dim, 4 * dim),
                f'layers.{i}.downsample.norm.weight': (4 * dim, ),
                f'layers.{i}.downsample.norm.bias': (4 * dim, ),
            })
        res //= 2
    final = embed_dims * 2**(len(depths) - 1)
    sd.update({
        'norm.weight': (final, ),
        'norm.bias': (final, ),
        'head.weight': (1000, final),
        'head.bias': (1000, )
    })
    state = {k: torch.randn(shape) for k, shape in sd.items()}
    state.update(buffers)
    return state


def _official_pvt_state_dict(embed_dims=(64, 128, 320, 512),
                             depths=(2, 2, 2, 2), num_heads=(1, 2, 5, 8),
                             mlp_ratios=(8, 8, 4, 4), img=224, v2=False):
    """Names and shapes of a released FLatten-PVT / PVTv2 file."""
    sd = {}
    res, in_ch = img // 4, 3
    for i, dim in enumerate(embed_dims):
        s = i + 1
        kernel = (7 if i == 0 else 3) if v2 else (4 if i == 0 else 2)
        sd.update({
            f'patch_embed{s}.proj.weight': (dim, in_ch, kernel, kernel),
            f'patch_embed{s}.proj.bias': (dim, ),
            f'patch_embed{s}.norm.weight': (dim, ),
            f'patch_embed{s}.norm.bias': (dim, ),
        })
        if v2:
            sd.update({f'norm{s}.weight': (dim, ), f'norm{s}.bias': (dim, )})
        else:
            sd[f'pos_embed{s}'] = (1, res * res, dim)
        hidden = dim * mlp_ratios[i]
        for j in range(depths[i]):
            p = f'block{s}.{j}.'
            sd.update({
                p + 'norm1.weight': (dim, ),
                p + 'norm1.bias': (dim, ),
                p + 'attn.q.weight': (dim, dim),
                p + 'attn.q.bias': (dim, ),
                p + 'attn.kv.weight': (2 * dim, dim),
                p + 'attn.kv.bias': (2 * dim, ),
                p + 'attn.proj.weight': (dim, dim),
                p + 'attn.proj.bias': (dim, ),
                p + 'attn.dwc.weight': (dim // num_heads[i], 1, 5, 5),
                p + 'attn.dwc.bias': (dim // num_heads[i], ),
                p + 'attn.scale': (1, 1, dim),
                p + 'attn.positional_encoding': (1, res * res, dim),
                p + 'norm2.weight': (dim, ),
                p + 'norm2.bias': (dim, ),
                p + 'mlp.fc1.weight': (hidden, dim),
                p + 'mlp.fc1.bias': (hidden, ),
                p + 'mlp.fc2.weight': (dim, hidden),
                p + 'mlp.fc2.bias': (dim, ),
            })
            if v2:
                sd.update({
                    p + 'mlp.dwconv.dwconv.weight': (hidden, 1, 3, 3),
                    p + 'mlp.dwconv.dwconv.bias': (hidden, ),
                })
        res, in_ch = res // 2, dim
    if not v2:
        sd.update({'norm.weight': (512, ), 'norm.bias': (512, )})
    sd.update({'head.weight': (1000, 512), 'head.bias': (1000, )})
    return {k: torch.randn(shape) for k, shape in sd.items()}


@pytest.fixture(scope='module')
def official_files(tmp_path_factory):
    root = tmp_path_factory.mktemp('official')
    torch.manual_seed(0)
    states = {
        'swin_t': _official_swin_state_dict(),
        'pvt_t': _official_pvt_state_dict(),
        'pvtv2_b0': _official_pvt_state_dict(
            embed_dims=(32, 64, 160, 256), v2=True),
    }
    paths = {}
    for name, state in states.items():
        paths[name] = str(root / f'flatten_{name}.pth')
        torch.save({'model': state, 'epoch': 300}, paths[name])
    return states, paths


def _load(cls, path, **kwargs):
    model = cls(init_cfg=dict(type='Pretrained', checkpoint=path), **kwargs)
    model.init_weights()
    return model


@pytest.mark.parametrize('name, cls, kwargs', [
    ('swin_t', FLattenSwinTransformer, dict(out_indices=(3, ))),
    ('pvt_t', FLattenPVT, dict(out_indices=(3, ), out_norm=False)),
    ('pvtv2_b0', FLattenPVTv2, dict(out_indices=(3, ))),
])
def test_official_checkpoint_fills_every_key(official_files, name, cls,
                                             kwargs):
    """The classification layout: every backbone tensor comes from the
    file; only the ImageNet head is left over."""
    states, paths = official_files
    arch = {'swin_t': 'tiny', 'pvt_t': 'tiny', 'pvtv2_b0': 'b0'}[name]
    model = _load(cls, paths[name], arch=arch, **kwargs)
    report = model.load_report
    assert report.missing == []
    assert report.mismatched == []
    assert sorted(report.unexpected) == ['head.bias', 'head.weight']
    loaded = model.state_dict()
    official = states[name]
    if name == 'swin_t':
        qkv = official['layers.0.blocks.1.attn.qkv.weight']
        assert torch.equal(loaded['stages.0.blocks.1.attn.q.weight'],
                           qkv[:96])
        assert torch.equal(loaded['stages.0.blocks.1.attn.kv.weight'],
                           qkv[96:])
        assert torch.equal(
            loaded['stages.2.blocks.3.attn.w_msa.relative_position_bias_'
                   'table'],
            official['layers.2.blocks.3.attn.relative_position_bias_table'])
        assert torch.equal(loaded['norm3.weight'], official['norm.weight'])
    else:
        ffn = ('ffn.layers.0.weight' if name == 'pvtv2_b0' else
               'ffn.layers.0.0.weight')
        fc1 = official['block2.0.mlp.fc1.weight']
        assert torch.equal(loaded[f'stages.1.blocks.0.{ffn}'],
                           fc1[..., None, None] if name == 'pvtv2_b0' else fc1)
        assert torch.equal(
            loaded['stages.3.blocks.1.attn.positional_encoding.weight'],
            official['block4.1.attn.positional_encoding'])

    _assert_load_state_dict_converts(model, official)


def _assert_load_state_dict_converts(model, official):
    """Plain ``load_state_dict`` of the official tensors (the head left
    out) converts them on its own, strictly, to the model ``init_cfg``
    gave: same outputs. Loaded into the same model, every tensor wiped
    first, so nothing survives from the first load."""
    model.eval()
    x = torch.randn(1, 3, 32, 64)
    with torch.no_grad():
        expected = model(x)
        for tensor in model.state_dict().values():
            tensor.fill_(float('nan') if tensor.is_floating_point() else 0)
    model.load_state_dict(
        {k: v for k, v in official.items() if not k.startswith('head.')},
        strict=True)
    with torch.no_grad():
        for a, b in zip(model(x), expected, strict=True):
            assert torch.equal(a, b)


def test_official_checkpoint_into_detection_layout(official_files):
    """Downstream: positional encodings of a model built for another
    pretraining size are resized; only the new output norms are missing."""
    _, paths = official_files
    swin = _load(FLattenSwinTransformer, paths['swin_t'],
                 pretrain_img_size=384)
    assert swin.load_report.mismatched == []
    assert sorted(swin.load_report.missing) == [
        f'norm{i}.{p}' for i in range(3) for p in ('bias', 'weight')
    ]
    assert swin.stages[0].blocks[0].attn.positional_encoding.weight.shape \
        == (1, 96 * 96, 96)
    pvt = _load(FLattenPVT, paths['pvt_t'])
    assert sorted(pvt.load_report.missing) == [
        f'norm{i}.{p}' for i in range(4) for p in ('bias', 'weight')
    ]
    v2 = _load(FLattenPVTv2, paths['pvtv2_b0'], arch='b0')
    assert v2.load_report.missing == []


def test_patch_merging_conversion_matches_official_merge():
    """Official merging concatenates (0,0), (1,0), (0,1), (1,1) neighbours;
    the converted weights must give the same output through mmcv's
    unfold-based PatchMerging."""
    state = _official_swin_state_dict(**TINY_SWIN)
    model = FLattenSwinTransformer(TINY_SWIN)
    converted = model.convert_official(state)
    model.load_state_dict(converted, strict=False)
    C = TINY_SWIN['embed_dims']
    x = torch.randn(2, 6 * 10, C)
    w = state['layers.0.downsample.reduction.weight']
    nw, nb = (state[f'layers.0.downsample.norm.{p}']
              for p in ('weight', 'bias'))
    grid = x.view(2, 6, 10, C)
    merged = torch.cat([grid[:, 0::2, 0::2], grid[:, 1::2, 0::2],
                        grid[:, 0::2, 1::2], grid[:, 1::2, 1::2]], -1)
    ref = F.linear(
        F.layer_norm(merged.reshape(2, -1, 4 * C), (4 * C, ), nw, nb), w)
    ours, hw = model.stages[0].downsample(x, (6, 10))
    assert hw == (3, 5)
    assert torch.allclose(ours, ref, atol=1e-5)


def test_conversion_is_idempotent_and_skips_other_layouts(official_files):
    states, _ = official_files
    for cls, name in ((FLattenSwinTransformer, 'swin_t'),
                      (FLattenPVT, 'pvt_t')):
        model = cls(arch='tiny')
        once = model.convert_official(states[name])
        assert once is not states[name]
        assert model.convert_official(once) is once
        if name == 'swin_t':
            assert not any(k.endswith('attn_mask') for k in once)
        # This package's own layout passes through.
        own = model.state_dict()
        assert model.convert_official(own) is own


def test_checkpoint_that_matches_nothing_raises(official_files, tmp_path):
    _, paths = official_files
    with pytest.raises(RuntimeError, match='matches none'):
        _load(FLattenSwinTransformer, paths['pvt_t'], arch=TINY_SWIN)
    path = str(tmp_path / 'other.pth')
    torch.save({'state_dict': {'conv1.weight': torch.zeros(3)}}, path)
    with pytest.raises(RuntimeError, match='matches none'):
        _load(FLattenPVT, path, arch=TINY_PVT)


def _run_converter(monkeypatch, *args):
    monkeypatch.setattr(sys, 'argv', ['flatten2vitattn.py', *args])
    runpy.run_path('tools/model_converters/flatten2vitattn.py',
                   run_name='__main__')


def test_converter_script(official_files, tmp_path, monkeypatch):
    """tools/model_converters/flatten2vitattn.py: a file the classifier
    loads strictly (backbone and head) and the backbone loads as
    Pretrained."""
    from mmengine.config import Config
    from mmpretrain.registry import MODELS

    _, paths = official_files
    dst = str(tmp_path / 'converted.pth')
    _run_converter(monkeypatch, paths['pvt_t'], dst)
    converted = torch.load(dst, weights_only=True)['state_dict']
    assert all(k.startswith(('backbone.', 'head.fc.')) for k in converted)

    cfg = Config.fromfile('configs/flatten/flatten-pvt-t_8xb128_in1k.py')
    classifier = MODELS.build(cfg.model)
    classifier.load_state_dict(converted, strict=True)

    backbone = _load(FLattenPVT, dst, out_indices=(3, ), out_norm=False)
    assert backbone.load_report.missing == []
    assert backbone.load_report.unexpected == []

    with pytest.raises(ValueError, match='not an official FLatten'):
        _run_converter(monkeypatch, dst, str(tmp_path / 'again.pth'))


# ----------------------------------------------------------------- precision


def test_a_whole_map_file_loads_strictly_into_the_windowed_model(tmp_path):
    """The file of FLatten-Swin with FLatten stages over the whole map
    (``attn.*``) loads strictly into the same model in 56-token windows
    (``attn.w_msa.*``) and the other way round, through ``init_cfg`` too;
    a file missing attention weights is refused, naming them."""
    from vitattn_mm.models.checkpoint.pretrained import load_pretrained
    torch.manual_seed(0)
    whole = build_tiny('FLattenSwinTransformer')
    windowed = build_tiny('FLattenSwinTransformer', flatten_window_size=56)
    assert any('.attn.w_msa.' in k for k in windowed.state_dict())
    state = whole.state_dict()
    windowed.load_state_dict(state, strict=True)
    loaded = windowed.state_dict()
    for key, value in state.items():
        inner = key.replace('.attn.', '.attn.w_msa.', 1)
        torch.testing.assert_close(loaded[inner if inner in loaded else key],
                                   value)
    build_tiny('FLattenSwinTransformer').load_state_dict(
        windowed.state_dict(), strict=True)
    path = str(tmp_path / 'whole.pth')
    torch.save({'state_dict': {f'backbone.{k}': v for k, v in state.items()}},
               path)
    report = load_pretrained(build_tiny('FLattenSwinTransformer',
                                        flatten_window_size=56), path)
    assert report.missing == [] and report.unexpected == []
    cut = {k: v for k, v in state.items()
           if not k.startswith('stages.0.blocks.0.attn.kv.')}
    torch.save(cut, path)
    with pytest.raises(RuntimeError,
                       match=r'stages\.0\.blocks\.0\.attn\.w_msa\.kv\.weight'):
        load_pretrained(build_tiny('FLattenSwinTransformer',
                                   flatten_window_size=56), path)


def test_the_leading_stages_plan_is_a_value():
    """FLatten's plan is a named value (compared, printed, called with the
    arch and grids), not a closure: windows clipped to each stage's grid,
    the skeleton's own attention (None) after the FLatten stages."""
    from vitattn_mm.models.backbones.flatten import (LeadingStagesPlan,
                                                     focused_linear)
    plan = LeadingStagesPlan(focused_linear(3, 5), 2, window_size=56)
    assert plan == LeadingStagesPlan(focused_linear(3, 5), 2, 56)
    assert 'num_flatten_stages=2' in repr(plan)
    stages = plan(dict(depths=[2, 2, 6, 2]), [(56, 56), (28, 28), (14, 14),
                                              (7, 7)])
    assert [s and s['window_size'] for s in stages] == [(56, 56), (28, 28),
                                                         None, None]
    assert stages[0]['window_msa'] == 'FocusedLinearAttention'
    with pytest.raises(ValueError, match='num_flatten_stages must be in'):
        LeadingStagesPlan(focused_linear(3, 5), 5)(dict(depths=[1] * 4), [])


@pytest.mark.parametrize('head_major', [False, True])
@pytest.mark.parametrize('p', [3, 2.5])
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_focused_features_backward_in_closed_form(p, dtype, head_major):
    """FocusedFeatures' written-out gradient equals autograd's through the
    plain ops (input and scale), also for tokens that are all ``eps``
    (every channel negative: the norms are ~eps^p and a careless grouping
    overflows fp32) and at large inputs; tokens as ``(B, N, C)`` or
    head-major ``(B, heads, N, C / heads)``, the norms over all of a
    token's channels. (The plain ops are what a captured graph runs; the
    ONNX round trips hold them to eager.)"""
    from vitattn_mm.ops.focusing import (FocusedFeatures,
                                      focused_features_ops)
    torch.manual_seed(0)
    x = torch.randn(2, 9, 24) * 3
    x[0, :3] = -torch.rand(3, 24)  # all-eps tokens
    x[1, 4:6] *= 1e3
    x = x.to(dtype).requires_grad_()
    s = (torch.rand(1, 1, 24) + 0.3).requires_grad_()
    g = torch.randn(2, 9, 24)
    dims = (-1, )
    if head_major:
        # (contiguous, as the joint route's features are)
        x, s, g = (t.unflatten(-1, (3, 8)).transpose(1, 2).contiguous()
                   for t in (x.detach(), s.detach(), g))
        x.requires_grad_(), s.requires_grad_()
        dims = (1, 3)
    ours = FocusedFeatures.apply(x, s, p, dims)[0]
    reference = focused_features_ops(x, s, p, dims)
    if head_major:  # the norm is still over each token's 24 channels
        torch.testing.assert_close(
            ours.transpose(1, 2).flatten(2),
            focused_features_ops(x.transpose(1, 2).flatten(2),
                                 s.transpose(1, 2).flatten(2), p))
    torch.testing.assert_close(ours, reference)
    got = torch.autograd.grad(ours, (x, s), g)
    want = torch.autograd.grad(reference, (x, s), g)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and torch.isfinite(a).all()
        rel = ((a.float() - b.float()).norm() / b.float().norm()).item()
        assert rel < (1e-5 if dtype == torch.float32 else 5e-3), rel
