"""CSwin: the cross-shaped window attention against a naive reference, the
skeleton at any size, FLatten-CSwin's official checkpoint layout and its
model sizes. The shared contract (shapes, freezing, checkpointing, state
dicts) runs in tests/test_backbone_contract.py."""
import re
import runpy
import sys

import pytest
import torch
import torch.nn.functional as F

from tiny_backbones import ARCHS
from vitattn_mm.models.attentions import (CrossShapedWindowAttention,
                                          FocusedLinearAttention)
from vitattn_mm.models.backbones import (AttnCSwinTransformer,
                                         FLattenCSwinTransformer)

#: Even heads: the cross-shaped blocks split them between two branches.
TINY = ARCHS['swin-1221']


# ---------------------------------------------------------------- attention
def _naive_cross_shaped(attn, x, hw):
    """Every stripe on its own: explicit softmax over the stripe's tokens,
    LePE as a 3x3 depthwise conv of the stripe's values (zero outside the
    stripe). Stripes start at 0; the last one of a side is narrower."""
    H, W = hw
    B, N, C = x.shape
    qkv = F.linear(x, attn.qkv.weight, attn.qkv.bias).view(B, H, W, 3, C)
    branches = attn.num_branches
    heads = attn.num_heads // branches
    width = C // branches
    out = torch.zeros(B, H, W, C, dtype=x.dtype)
    for b in range(branches):
        wh, ww = (side if w is None else w
                  for side, w in zip(hw, attn.stripe(b)))
        channels = slice(b * width, (b + 1) * width)
        conv = attn.lepe[b]
        for top in range(0, H, wh):
            for left in range(0, W, ww):
                rows = slice(top, min(top + wh, H))
                cols = slice(left, min(left + ww, W))
                q, k, v = qkv[:, rows, cols, :, channels].unbind(3)
                h, w = q.shape[1:3]
                lepe = F.conv2d(v.permute(0, 3, 1, 2), conv.weight,
                                conv.bias, padding=1, groups=width)
                q, k, v = (t.reshape(B, h * w, heads, -1).transpose(1, 2)
                           for t in (q, k, v))
                logits = q @ k.transpose(-2, -1) * attn.scale
                weights = logits.exp() / logits.exp().sum(-1, keepdim=True)
                o = (weights @ v).transpose(1, 2).reshape(B, h, w, width)
                out[:, rows, cols, channels] = o + lepe.permute(0, 2, 3, 1)
    return F.linear(out.reshape(B, N, C), attn.proj.weight, attn.proj.bias)


@pytest.mark.parametrize('split_size', [2, 3, None])
@pytest.mark.parametrize('hw', [(6, 12), (7, 11)])
def test_cross_shaped_attention_matches_naive_reference(split_size, hw):
    """At a multiple of every stripe width (6x12 for 2 and 3) and at an odd
    size (7x11: narrower last stripes, padded keys masked out)."""
    torch.manual_seed(0)
    attn = CrossShapedWindowAttention(16, 4, split_size=split_size).double()
    x = torch.randn(2, hw[0] * hw[1], 16, dtype=torch.float64)
    with torch.no_grad():
        for conv in attn.lepe:
            conv.weight.normal_()
        out, state = attn(x, hw)
        assert state is None
        torch.testing.assert_close(out, _naive_cross_shaped(attn, x, hw))


def test_query_attention_is_the_stripe_softmax():
    torch.manual_seed(0)
    attn = CrossShapedWindowAttention(16, 4, split_size=3)
    hw, index = (7, 8), 3 * 8 + 7  # row 3, column 7: the last, narrow stripe
    x = torch.randn(1, 56, 16)
    qa = attn.query_attention(x, hw, index)
    assert qa.weights.shape == (4, 56) and qa.key_hw == hw
    torch.testing.assert_close(qa.weights.sum(-1), torch.ones(4))
    grid = qa.weights.view(4, *hw) > 0
    # heads 0-1: the vertical stripe of columns 6-7; 2-3: rows 3-5.
    assert grid[:2].nonzero()[:, 2].unique().tolist() == [6, 7]
    assert grid[2:].nonzero()[:, 1].unique().tolist() == [3, 4, 5]


def test_cross_shaped_attention_needs_even_heads():
    with pytest.raises(ValueError, match='num_heads must be even'):
        CrossShapedWindowAttention(12, 3, split_size=7)
    CrossShapedWindowAttention(12, 3, split_size=None)  # whole map: any


def test_focused_linear_attention_lepe_adds_depthwise_conv_of_v():
    """FLatten-CSwin's option: the output gains ``proj(LePE(v))``."""
    torch.manual_seed(0)
    with_lepe = FocusedLinearAttention(16, 2, grid_size=(5, 6), lepe=True)
    plain = FocusedLinearAttention(16, 2, grid_size=(5, 6))
    plain.load_state_dict(
        {k: v for k, v in with_lepe.state_dict().items()
         if not k.startswith('lepe.')})
    x, hw = torch.randn(2, 30, 16), (5, 6)
    v = with_lepe.kv(x).chunk(2, dim=-1)[1]
    lepe = with_lepe.lepe(v.transpose(1, 2).reshape(2, 16, *hw))
    expected = plain(x, hw)[0] + F.linear(lepe.flatten(2).transpose(1, 2),
                                          with_lepe.proj.weight)
    with torch.no_grad():
        torch.testing.assert_close(with_lepe(x, hw)[0], expected)
    with pytest.raises(ValueError, match='sr_ratio must be 1'):
        FocusedLinearAttention(16, 2, grid_size=(5, 6), lepe=True,
                               sr_ratio=2)


# ----------------------------------------------------------------- skeleton
def test_stem_padding_keeps_official_grid_at_multiples_of_four():
    """Sides that are multiples of 4 are not padded: the stem output is the
    plain 7x7 stride-4 conv (padding 2) of the image."""
    model = AttnCSwinTransformer(TINY, out_indices=(0, )).eval()
    x = torch.randn(1, 3, 36, 44)
    embed = model.patch_embed
    ref = F.conv2d(x, embed.projection.weight, embed.projection.bias,
                   stride=4, padding=2)
    tokens, hw = model.forward_stem(x)
    assert hw == (9, 11)
    torch.testing.assert_close(tokens, embed.norm(
        ref.flatten(2).transpose(1, 2)))


def test_default_attention_per_stage():
    model = FLattenCSwinTransformer(TINY)
    attns = [stage.blocks[0].attn for stage in model.stages]
    assert [type(a).__name__ for a in attns] == [
        'FocusedLinearAttention', 'FocusedLinearAttention',
        'CrossShapedWindowAttention', 'CrossShapedWindowAttention'
    ]
    assert attns[0].lepe is not None
    assert attns[0].positional_encoding.grid_hw == (56, 56)
    assert [a.split_size for a in attns[2:]] == [7, None]
    cswin = AttnCSwinTransformer(TINY, split_sizes=(1, 2, 3, 3))
    assert [s.blocks[0].attn.split_size for s in cswin.stages] == [
        1, 2, 3, None
    ]


@pytest.mark.parametrize('arch, params', [('tiny', 21), ('small', 35),
                                          ('base', 75)])
def test_flatten_cswin_sizes_match_the_paper(arch, params):
    """Parameters with the 1000-class head, built on the meta device."""
    with torch.device('meta'):
        model = FLattenCSwinTransformer(arch, out_indices=(3, ))
    width = model.num_features[-1]
    total = sum(p.numel() for p in model.parameters()) + width * 1001
    assert abs(total / 1e6 - params) / params < 0.02


# ------------------------------------------------------- official checkpoint
def _official_state_dict(embed_dims, depths, num_heads, img=224,
                         flatten_stages=2):
    """Names and shapes of a released FLatten-CSwin file (random values) of
    the given arch: FLatten blocks keep one global branch ``attns.0`` with
    LePE, the cross-shaped blocks two half-width branches, the last stage
    one."""
    c = embed_dims
    sd = {
        'stage1_conv_embed.0.weight': (c, 3, 7, 7),
        'stage1_conv_embed.0.bias': (c, ),
        'stage1_conv_embed.2.weight': (c, ),
        'stage1_conv_embed.2.bias': (c, ),
    }
    res = img // 4
    for i, depth in enumerate(depths):
        dim = embed_dims * 2**i
        if i > 0:
            sd.update({
                f'merge{i}.conv.weight': (dim, dim // 2, 3, 3),
                f'merge{i}.conv.bias': (dim, ),
                f'merge{i}.norm.weight': (dim, ),
                f'merge{i}.norm.bias': (dim, ),
            })
        for j in range(depth):
            p = f'stage{i + 1}.{j}.'
            sd.update({
                p + 'qkv.weight': (3 * dim, dim),
                p + 'qkv.bias': (3 * dim, ),
                p + 'norm1.weight': (dim, ),
                p + 'norm1.bias': (dim, ),
                p + 'proj.weight': (dim, dim),
                p + 'proj.bias': (dim, ),
                p + 'mlp.fc1.weight': (4 * dim, dim),
                p + 'mlp.fc1.bias': (4 * dim, ),
                p + 'mlp.fc2.weight': (dim, 4 * dim),
                p + 'mlp.fc2.bias': (dim, ),
                p + 'norm2.weight': (dim, ),
                p + 'norm2.bias': (dim, ),
            })
            if i < flatten_stages:
                head_dim = dim // num_heads[i]
                sd.update({
                    p + 'attns.0.get_v.weight': (dim, 1, 3, 3),
                    p + 'attns.0.get_v.bias': (dim, ),
                    p + 'attns.0.dwc.weight': (head_dim, 1, 5, 5),
                    p + 'attns.0.dwc.bias': (head_dim, ),
                    p + 'attns.0.scale': (1, 1, dim),
                    p + 'attns.0.positional_encoding': (1, res * res, dim),
                })
            else:
                branches = 1 if i == len(depths) - 1 else 2
                for b in range(branches):
                    sd.update({
                        p + f'attns.{b}.get_v.weight':
                        (dim // branches, 1, 3, 3),
                        p + f'attns.{b}.get_v.bias': (dim // branches, ),
                    })
        res //= 2
    final = embed_dims * 2**(len(depths) - 1)
    sd.update({
        'norm.weight': (final, ),
        'norm.bias': (final, ),
        'head.weight': (1000, final),
        'head.bias': (1000, )
    })
    return {k: _random_value(k, shape) for k, shape in sd.items()}


def _random_value(name, shape):
    """Random, at a trained model's scale so that activations stay O(1)
    through the forward pass: weights ``N(0, 1/fan_in)``, LayerNorm weights
    ``1 + N(0, 0.1^2)``, biases ``N(0, 0.1^2)``. The tensors the official
    code initialises to zero (FLatten's ``positional_encoding`` and
    ``scale``) are random too, so that they take part in the comparison."""
    if name.endswith('positional_encoding'):
        return torch.randn(shape) * 0.5
    if name.endswith('attns.0.scale'):
        return torch.randn(shape)
    if len(shape) >= 2:
        fan_in = 1
        for size in shape[1:]:
            fan_in *= size
        return torch.randn(shape) * fan_in**-0.5
    if re.search(r'(^|\.)(norm\d?|stage1_conv_embed\.2)\.weight$', name):
        return 1 + torch.randn(shape) * 0.1
    return torch.randn(shape) * 0.1


@pytest.fixture(scope='module')
def official_file(tmp_path_factory):
    torch.manual_seed(0)
    state = _official_state_dict(**TINY)
    ema = {k: v + 1 for k, v in state.items()}
    path = str(tmp_path_factory.mktemp('official') / 'flatten_cswin_t.pth')
    torch.save({'model': state, 'state_dict_ema': ema, 'epoch': 300}, path)
    return state, ema, path


def _load(path, **kwargs):
    model = FLattenCSwinTransformer(
        TINY, out_indices=(3, ),
        init_cfg=dict(type='Pretrained', checkpoint=path, **kwargs))
    model.init_weights()
    return model


def test_official_checkpoint_fills_every_key(official_file):
    """Through init_cfg: no backbone key missing, only the classifier's
    ``head.*`` left over, every tensor where it belongs."""
    state, ema, path = official_file
    model = _load(path)
    report = model.load_report
    assert report.missing == [] and report.mismatched == []
    assert sorted(report.unexpected) == ['head.bias', 'head.weight']
    loaded = model.state_dict()
    qkv = state['stage1.0.qkv.weight']
    assert torch.equal(loaded['stages.0.blocks.0.attn.q.weight'], qkv[:16])
    assert torch.equal(loaded['stages.0.blocks.0.attn.kv.weight'], qkv[16:])
    for ours, official in (
        ('stages.1.blocks.0.attn.lepe.weight',
         'stage2.0.attns.0.get_v.weight'),
        ('stages.1.blocks.0.attn.positional_encoding.weight',
         'stage2.0.attns.0.positional_encoding'),
        ('stages.2.blocks.1.attn.qkv.weight', 'stage3.1.qkv.weight'),
        ('stages.2.blocks.1.attn.lepe.1.weight',
         'stage3.1.attns.1.get_v.weight'),
        ('stages.3.blocks.0.attn.lepe.0.bias', 'stage4.0.attns.0.get_v.bias'),
        ('stages.2.blocks.0.ffn.layers.0.0.weight', 'stage3.0.mlp.fc1.weight'),
        ('patch_embed.projection.weight', 'stage1_conv_embed.0.weight'),
        ('patch_embed.norm.bias', 'stage1_conv_embed.2.bias'),
        ('stages.3.patch_embed.projection.weight', 'merge3.conv.weight'),
        ('norm3.weight', 'norm.weight'),
    ):
        assert torch.equal(loaded[ours], state[official]), ours
    # The EMA weights, on request.
    ema_model = _load(path, state_dict_key='state_dict_ema')
    assert torch.equal(ema_model.state_dict()['norm3.weight'],
                       ema['norm.weight'])
    # Plain load_state_dict converts the official tensors on its own, to
    # the model init_cfg gives.
    direct = FLattenCSwinTransformer(TINY, out_indices=(3, )).eval()
    direct.load_state_dict(
        {k: v for k, v in state.items() if not k.startswith('head.')},
        strict=True)
    x = torch.randn(1, 3, 64, 80)
    with torch.no_grad():
        assert torch.equal(direct(x)[0], model.eval()(x)[0])


def test_conversion_is_idempotent(official_file):
    state, _, _ = official_file
    model = FLattenCSwinTransformer(TINY)
    once = model.convert_official(state)
    assert once is not state
    assert model.convert_official(once) is once
    assert AttnCSwinTransformer(TINY).convert_official(once) is once
    own = model.state_dict()
    assert model.convert_official(own) is own


def test_cswin_blocks_of_the_official_layout():
    """A plain CSwin file (no FLatten blocks) fills the CSwin skeleton."""
    state = _official_state_dict(**TINY, flatten_stages=0)
    model = AttnCSwinTransformer(TINY, out_indices=(3, )).eval()
    converted = model.convert_official(state)
    converted.pop('head.weight'), converted.pop('head.bias')
    model.load_state_dict(converted, strict=True)
    # The official tensors through plain load_state_dict: the same model.
    direct = AttnCSwinTransformer(TINY, out_indices=(3, )).eval()
    direct.load_state_dict(
        {k: v for k, v in state.items() if not k.startswith('head.')},
        strict=True)
    x = torch.randn(1, 3, 64, 80)
    with torch.no_grad():
        assert torch.equal(direct(x)[0], model(x)[0])


def test_converter_script(official_file, tmp_path, monkeypatch):
    """tools/model_converters/flatten2vitattn.py: the classifier loads the
    result strictly, the backbone with zero missing / unexpected keys, and
    both give what the official file gives through init_cfg."""
    from mmpretrain.registry import MODELS

    _, _, path = official_file
    dst = str(tmp_path / 'converted.pth')
    monkeypatch.setattr(sys, 'argv', ['flatten2vitattn.py', path, dst])
    runpy.run_path('tools/model_converters/flatten2vitattn.py',
                   run_name='__main__')
    converted = torch.load(dst, weights_only=True)['state_dict']
    assert all(k.startswith(('backbone.', 'head.fc.')) for k in converted)
    classifier = MODELS.build(
        dict(type='ImageClassifier',
             backbone=dict(type='FLattenCSwinTransformer', arch=TINY,
                           out_indices=(3, )),
             neck=dict(type='GlobalAveragePooling'),
             head=dict(type='LinearClsHead', num_classes=1000,
                       in_channels=128)))
    classifier.load_state_dict(converted, strict=True)

    backbone = _load(dst)
    assert backbone.load_report.missing == []
    assert backbone.load_report.unexpected == []
    direct = _load(path).eval()
    x = torch.randn(1, 3, 64, 80)
    with torch.no_grad():
        assert torch.equal(backbone.eval()(x)[0], direct(x)[0])


# ------------------------------------------- the official forward, restated
#: FLatten-CSwin-T as released (LeapLabTHU/FLatten-Transformer,
#: models/flatten_cswin.py, cfgs/flatten_cswin_t.yaml, config.py):
#: ATTN_TYPE 'LLSS' (focused linear attention in stages 1-2, CSwin's LePE
#: attention in 3-4), CSWIN_LA_SPLIT_SIZE '56-28-14-7' for the 'L' stages,
#: split_size [1, 2, 7, 7] for the 'S' stages, focusing factor 3, dwc
#: kernel 5, qkv_bias True, 224x224 input.
OFFICIAL_T = dict(attn_type='LLSS', la_split_size=(56, 28, 14, 7),
                  split_size=(1, 2, 7, 7), focusing_factor=3, kernel_size=5)


def _img2windows(x, h_sp, w_sp):
    """``(B, C, H, W)`` -> ``(B * windows, h_sp * w_sp, C)``: windows in
    (batch, window row, window column) order, tokens row-major inside."""
    B, C, H, W = x.shape
    x = x.view(B, C, H // h_sp, h_sp, W // w_sp, w_sp)
    return x.permute(0, 2, 4, 3, 5, 1).reshape(-1, h_sp * w_sp, C)


def _windows2img(x, h_sp, w_sp, H, W):
    """The inverse: ``(B * windows, h_sp * w_sp, C)`` -> ``(B, H*W, C)``."""
    B = x.shape[0] * h_sp * w_sp // (H * W)
    x = x.view(B, H // h_sp, W // w_sp, h_sp, w_sp, -1)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(B, H * W, -1)


def _window_images(x, h_sp, w_sp, reso):
    """``(B, L, C)`` tokens -> ``(B * windows, C, h_sp, w_sp)`` (the
    official ``get_lepe`` layout, which the values and LePE use)."""
    B, L, C = x.shape
    x = x.transpose(1, 2).reshape(B, C, reso // h_sp, h_sp, reso // w_sp,
                                  w_sp)
    return x.permute(0, 2, 4, 1, 3, 5).reshape(-1, C, h_sp, w_sp)


def _official_lepe_attention(sd, p, q, k, v, heads, reso, h_sp, w_sp):
    """``LePEAttention.forward``: softmax attention of scaled q in every
    (h_sp, w_sp) window, plus ``get_v`` (3x3 depthwise conv, zero-padded at
    the window border) of the window's values."""
    B, L, C = q.shape
    d = C // heads
    img = (lambda t: t.transpose(1, 2).reshape(B, C, reso, reso))
    q, k = (_img2windows(img(t), h_sp, w_sp).reshape(-1, h_sp * w_sp,
                                                     heads, d).transpose(1, 2)
            for t in (q, k))
    v = _window_images(v, h_sp, w_sp, reso)
    lepe = F.conv2d(v, sd[p + 'get_v.weight'], sd[p + 'get_v.bias'],
                    padding=1, groups=C)
    lepe, v = (t.reshape(-1, heads, d, h_sp * w_sp).transpose(-2, -1)
               for t in (lepe, v))
    attn = ((q * d**-0.5) @ k.transpose(-2, -1)).softmax(dim=-1)
    x = (attn @ v + lepe).transpose(1, 2).reshape(-1, h_sp * w_sp, C)
    return _windows2img(x, h_sp, w_sp, reso, reso)


def _official_focused_attention(sd, p, q, k, v, heads, reso, h_sp, w_sp,
                                focusing_factor, kernel_size):
    """``FocusedLinearAttention.forward`` of FLatten-CSwin: keys gain
    ``positional_encoding``; q and k go through ReLU + 1e-6, divided by
    softplus(``scale``), focused (``x**p`` rescaled to the norm of x, over
    all C channels); per head ``q @ (k^T L^-0.5 @ v L^-0.5)`` divided by
    ``q @ mean(k) + 1e-6``; plus ``dwc`` (one kernel_size depthwise conv per
    head channel, shared by the heads) of v and ``get_v`` (3x3 depthwise
    conv over all C channels, LePE) of v."""
    B, L, C = q.shape
    d = C // heads
    # The official code reshapes the windows to (B, L, ...): it is only
    # right when the window is the whole map, as in the released models
    # (split 56 / 28 = the 224x224 model's stage-1 / 2 grids).
    assert h_sp * w_sp == L
    img = (lambda t: t.transpose(1, 2).reshape(B, C, reso, reso))
    q, k = (_img2windows(img(t), h_sp, w_sp) for t in (q, k))
    v = _window_images(v, h_sp, w_sp, reso)
    lepe = F.conv2d(v, sd[p + 'get_v.weight'], sd[p + 'get_v.bias'],
                    padding=1, groups=C).reshape(-1, C, L).transpose(1, 2)
    v = v.reshape(-1, C, L).transpose(1, 2)

    k = k + sd[p + 'positional_encoding']
    scale = F.softplus(sd[p + 'scale'])

    def kernel(t):
        t = (F.relu(t) + 1e-6) / scale
        norm = t.norm(dim=-1, keepdim=True)
        t = t**focusing_factor
        return t / t.norm(dim=-1, keepdim=True) * norm

    q, k = kernel(q), kernel(k)
    q, k, v = (t.reshape(B, L, heads, d).transpose(1, 2) for t in (q, k, v))
    z = 1 / (q @ k.mean(dim=-2, keepdim=True).transpose(-2, -1) + 1e-6)
    kv = (k.transpose(-2, -1) * L**-0.5) @ (v * L**-0.5)
    x = ((q @ kv) * z).transpose(1, 2).reshape(B, L, C)
    v = v.reshape(B * heads, h_sp, w_sp, d).permute(0, 3, 1, 2)
    dwc = F.conv2d(v, sd[p + 'dwc.weight'], sd[p + 'dwc.bias'],
                   padding=kernel_size // 2, groups=d)
    x = x + dwc.reshape(B, C, L).transpose(1, 2) + lepe
    return _windows2img(x, h_sp, w_sp, reso, reso)


def _official_forward(sd, img, depths, num_heads, attn_type='LLSS',
                      la_split_size=(56, 28, 14, 7), split_size=(1, 2, 7, 7),
                      focusing_factor=3, kernel_size=5):
    """``CSWinTransformer.forward`` of the official FLatten-CSwin, from its
    state dict: stem (7x7 stride-4 conv, padding 2, LayerNorm), per stage
    ``Merge_Block`` (3x3 stride-2 conv, padding 1, LayerNorm) and
    ``CSWinBlock`` s (``x + proj(attn(qkv(norm1(x))))``, then
    ``x + fc2(GELU(fc1(norm2(x))))``), the final ``norm``, the token mean
    and ``head``. A block whose stripe equals its grid, or in the last
    stage, has one branch over all heads; otherwise two half-width
    branches with half the heads each: vertical stripes (reso x split) on
    the first C/2 channels of q, k, v, horizontal ones (split x reso) on
    the others. Returns the normed last-stage tokens and the logits."""

    def ln(x, name):
        return F.layer_norm(x, x.shape[-1:], sd[name + '.weight'],
                            sd[name + '.bias'])

    def conv(x, name, stride, padding):
        return F.conv2d(x, sd[name + '.weight'], sd[name + '.bias'],
                        stride=stride, padding=padding)

    x = conv(img, 'stage1_conv_embed.0', 4, 2)
    reso = x.shape[-1]
    x = ln(x.flatten(2).transpose(1, 2), 'stage1_conv_embed.2')
    num_stages = len(depths)
    for i, depth in enumerate(depths):
        if i > 0:
            B, L, C = x.shape
            x = conv(x.transpose(1, 2).reshape(B, C, reso, reso),
                     f'merge{i}.conv', 2, 1)
            reso = x.shape[-1]
            x = ln(x.flatten(2).transpose(1, 2), f'merge{i}.norm')
        linear = attn_type[i] == 'L'
        split = la_split_size[i] if linear else split_size[i]
        branches = 1 if split == reso or i == num_stages - 1 else 2
        for j in range(depth):
            p = f'stage{i + 1}.{j}.'
            B, L, C = x.shape
            qkv = F.linear(ln(x, p + 'norm1'), sd[p + 'qkv.weight'],
                           sd[p + 'qkv.bias'])
            q, k, v = qkv.reshape(B, L, 3, C).unbind(2)
            width = C // branches
            outs = []
            for b in range(branches):
                h_sp, w_sp = ((reso, reso) if branches == 1 else
                              (reso, split) if b == 0 else (split, reso))
                qb, kb, vb = (t[..., b * width:(b + 1) * width]
                              for t in (q, k, v))
                a = f'{p}attns.{b}.'
                heads = num_heads[i] // branches
                if linear:
                    outs.append(_official_focused_attention(
                        sd, a, qb, kb, vb, heads, reso, h_sp, w_sp,
                        focusing_factor, kernel_size))
                else:
                    outs.append(_official_lepe_attention(
                        sd, a, qb, kb, vb, heads, reso, h_sp, w_sp))
            x = x + F.linear(torch.cat(outs, dim=-1), sd[p + 'proj.weight'],
                             sd[p + 'proj.bias'])
            h = F.gelu(F.linear(ln(x, p + 'norm2'), sd[p + 'mlp.fc1.weight'],
                                sd[p + 'mlp.fc1.bias']))
            x = x + F.linear(h, sd[p + 'mlp.fc2.weight'],
                             sd[p + 'mlp.fc2.bias'])
    x = ln(x, 'norm')
    logits = F.linear(x.mean(dim=1), sd['head.weight'], sd['head.bias'])
    return x, logits


def test_official_forward_equals_ours(official_file):
    """The official FLatten-CSwin-T forward (functionally restated above
    from models/flatten_cswin.py) on the official-layout file, against our
    backbone loaded from the same file through init_cfg: the normed last
    stage and the classifier logits (mean + ``head``) agree. 224x224: the
    official positional encodings and split sizes are for that size, and
    the grids (56, 28, 14, 7) are the full model's."""
    state, _, path = official_file
    torch.manual_seed(1)
    img = torch.randn(2, 3, 224, 224)
    model = _load(path).eval()
    with torch.no_grad():
        tokens, logits = _official_forward(state, img, TINY['depths'],
                                           TINY['num_heads'], **OFFICIAL_T)
        out = model(img)[0]
    assert out.shape == (2, 128, 7, 7)
    ours = out.flatten(2).transpose(1, 2)
    torch.testing.assert_close(ours, tokens, rtol=1e-5, atol=1e-5)
    ours_logits = F.linear(ours.mean(dim=1), state['head.weight'],
                           state['head.bias'])
    torch.testing.assert_close(ours_logits, logits, rtol=1e-5, atol=1e-5)
    # The parameters the official code initialises to zero matter here.
    zeroed = dict(state)
    for key in state:
        if key.endswith(('positional_encoding', 'attns.0.scale')):
            zeroed[key] = torch.zeros_like(state[key])
    with torch.no_grad():
        _, changed = _official_forward(zeroed, img, TINY['depths'],
                                       TINY['num_heads'], **OFFICIAL_T)
    assert (changed - logits).abs().max() > 1e-2
