"""L2ViT: numerics against naive references, shapes, checkpoints, AMP."""
import argparse
import runpy
import sys

import pytest
import torch
import torch.nn.functional as F
from mmengine.config import Config

from tiny_backbones import ARCHS
from vitattn_mm.models.attentions import LinearGlobalAttention, build_attention
from vitattn_mm.models.backbones.l2vit import (L2VIT_GLOBAL, L2VIT_LOCAL,
                                               L2ViT, L2ViTBlock)


def _block(dims, heads, local_window):
    """An L2ViT block as the backbone builds it: LWA (local windows) or LGA
    (linear global attention + LCM)."""
    attn = build_attention(L2VIT_LOCAL if local_window else L2VIT_GLOBAL,
                           embed_dims=dims, num_heads=heads)
    return L2ViTBlock(dims, attn, local_window=local_window)

#: A narrow L2ViT: each stage's local-window and global blocks.
SMALL_ARCH = ARCHS['l2vit-2222']

#: Parameter counts of the official ImageNet models (backbone + 1000-class
#: head), measured on ChuanyangZheng/L2ViT's classification/models/l2vit.py.
OFFICIAL_PARAMS = {'tiny': 28_596_781, 'small': 50_199_157,
                   'base': 88_577_188}


def official_state_dict(arch='tiny', num_classes=1000, seed=0):
    """Random tensors under the official classifier's key names and shapes
    (``L2ViT_Tiny`` / ``_Small`` / ``_Base`` of the official repository)."""
    gen = torch.Generator().manual_seed(seed)
    settings = L2ViT.parse_arch(arch)
    dims, depths = settings['embed_dims'], settings['depths']
    shapes = {}

    def bn(prefix, c):
        shapes.update({f'{prefix}.weight': (c, ), f'{prefix}.bias': (c, ),
                       f'{prefix}.running_mean': (c, ),
                       f'{prefix}.running_var': (c, ),
                       f'{prefix}.num_batches_tracked': ()})

    def affine(prefix, out_c, *in_shape):
        shapes.update({f'{prefix}.weight': (out_c, *in_shape),
                       f'{prefix}.bias': (out_c, )})

    stem = 'downsample_layers.0.proj.proj'
    affine(f'{stem}.0', dims[0] // 2, 3, 3, 3)
    bn(f'{stem}.1', dims[0] // 2)
    affine(f'{stem}.3', dims[0], dims[0] // 2, 3, 3)
    bn(f'{stem}.4', dims[0])
    affine('downsample_layers.0.norm', dims[0])
    for i in range(1, 4):
        affine(f'downsample_layers.{i}.proj', dims[i], dims[i - 1], 2, 2)
        affine(f'downsample_layers.{i}.norm', dims[i - 1])
    for i, depth in enumerate(depths):
        c = dims[i]
        for j in range(depth):
            p = f'stages.{i}.{j}'
            for k in range(2 if j % 2 == 0 else 1):
                affine(f'{p}.cpe.{k}.proj', c, 1, 3, 3)
            affine(f'{p}.norm1', c)
            affine(f'{p}.norm2', c)
            affine(f'{p}.attn.qkv', 3 * c, c)
            affine(f'{p}.attn.proj', c, c)
            affine(f'{p}.mlp.fc1', 4 * c, c)
            affine(f'{p}.mlp.fc2', c, 4 * c)
            if j % 2 == 1:
                shapes[f'{p}.attn.temperature'] = (
                    settings['num_heads'][i], 1, 1)
                affine(f'{p}.norm3', c)
                affine(f'{p}.local_mp.conv1', c, 1, 7, 7)
                bn(f'{p}.local_mp.bn', c)
                affine(f'{p}.local_mp.conv2', c, 1, 7, 7)
    affine('norm', dims[3])
    affine('head', num_classes, dims[3])
    state = {}
    for key, shape in shapes.items():
        if key.endswith('num_batches_tracked'):
            state[key] = torch.tensor(1000)
        elif key.endswith('running_var'):
            state[key] = torch.rand(shape, generator=gen) + 0.5
        else:
            state[key] = torch.randn(shape, generator=gen) * 0.05
    return state


@pytest.fixture(scope='module')
def official_tiny():
    return official_state_dict('tiny')


# ------------------------------------------------------------- numerics
def test_linear_attention_equals_explicit_normalised_form():
    """kv-first linear attention == ``(s * phi(Q) phi(K)^T V) / max(rowsum,
    100)`` with the N x N matrix formed explicitly, on tokens of growing
    magnitude so that the clamp is active for some rows and not others."""
    torch.manual_seed(0)
    attn = LinearGlobalAttention(64, 4)
    with torch.no_grad():
        attn.temperature.uniform_(0.1, 0.5)
    x = torch.randn(2, 150, 64) * torch.linspace(0.05, 3, 150)[:, None]
    with torch.no_grad():
        out, state = attn(x)
        assert state is None
        q, k, v = attn.qkv(x).double().reshape(2, 150, 3, 4, 16).permute(
            2, 0, 3, 1, 4).unbind(0)
        scores = F.relu(q) @ F.relu(k).transpose(-2, -1)  # (B, h, N, N)
        rowsum = scores.sum(-1, keepdim=True)
        ref = attn.temperature.double() * (scores @ v) / rowsum.clamp(min=100)
        ref = attn.proj(ref.transpose(1, 2).reshape(2, 150, 64).float())
    clamped = rowsum < 100
    assert clamped.float().mean() > 0.1 and (~clamped).float().mean() > 0.1
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-5)


def _naive_window_attention(attn, x):
    """Softmax attention of ``(B, N, C)`` windows, written out."""
    B, N, C = x.shape
    h = attn.num_heads
    q, k, v = attn.qkv(x).reshape(B, N, 3, h, C // h).permute(2, 0, 3, 1,
                                                              4).unbind(0)
    weights = ((q * (C // h)**-0.5) @ k.transpose(-2, -1)).softmax(-1)
    return attn.proj((weights @ v).transpose(1, 2).reshape(B, N, C))


def test_lwa_block_matches_naive_reference():
    """Official order (CPE, window attention on the zero-padded normed map,
    crop, CPE, MLP) on a map that is no multiple of the window."""
    torch.manual_seed(0)
    block = _block(32, 2, local_window=True).eval()
    H, W = 10, 13
    x = torch.randn(2, H * W, 32)
    with torch.no_grad():
        out, _ = block(x, (H, W))

        y = block.cpe[0](x, (H, W))
        normed = F.pad(block.norm1(y).view(2, H, W, 32), (0, 0, 0, 1, 0, 4))
        attended = torch.zeros_like(normed)
        for r in range(0, 14, 7):
            for c in range(0, 14, 7):
                window = normed[:, r:r + 7, c:c + 7].reshape(2, 49, 32)
                attended[:, r:r + 7, c:c + 7] = _naive_window_attention(
                    block.attn.w_msa, window).view(2, 7, 7, 32)
        y = y + attended[:, :H, :W].reshape(2, H * W, 32)
        y = block.cpe[1](y, (H, W))
        ffn = block.ffn.layers
        ref = y + ffn(block.norm2(y))
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-5)


def test_lga_block_matches_naive_reference():
    """Official order: CPE, + linear attention, + LCM (DWConv7 -> GELU -> BN
    -> DWConv7) of norm3, + MLP of norm2."""
    torch.manual_seed(0)
    block = _block(32, 2, local_window=False).eval()
    with torch.no_grad():
        block.local_mp.norm.running_mean.normal_()
        block.local_mp.norm.running_var.uniform_(0.5, 2)
    H, W = 9, 11
    x = torch.randn(2, H * W, 32)
    with torch.no_grad():
        out, _ = block(x, (H, W))

        y = block.cpe[0](x, (H, W))
        y = y + block.attn(block.norm1(y), (H, W))[0]
        lcm = block.local_mp
        fmap = block.norm3(y).transpose(1, 2).reshape(2, 32, H, W)
        fmap = lcm.conv2(lcm.norm(F.gelu(lcm.conv1(fmap))))
        y = y + fmap.flatten(2).transpose(1, 2)
        ref = y + block.ffn.layers(block.norm2(y))
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-5)


def test_blocks_alternate_lwa_lga():
    with torch.device('meta'):
        model = L2ViT('tiny')
    kinds = [[(type(b.attn).__name__, len(b.cpe)) for b in stage.blocks]
             for stage in model.stages]
    assert kinds == [[('WindowedAttention', 2),
                      ('LinearGlobalAttention', 1)] * n for n in (1, 1, 3, 1)]
    assert all(type(b.attn.w_msa).__name__ == 'MultiheadSelfAttention'
               for stage in model.stages for b in stage.blocks[::2])
    temperature = _block(96, 3, local_window=False).attn.temperature
    torch.testing.assert_close(temperature, torch.full((3, 1, 1), 32**-0.5))


# --------------------------------------------------------------- shapes
def test_tiny_docstring_shapes():
    model = L2ViT('tiny', out_indices=(1, 2, 3)).eval()
    with torch.no_grad():
        outs = model(torch.rand(1, 3, 97, 130))
    assert [tuple(o.shape) for o in outs] == [(1, 192, 13, 17),
                                              (1, 384, 7, 9),
                                              (1, 768, 4, 5)]


@pytest.mark.parametrize('arch', ['tiny', 'small', 'base'])
def test_params_equal_official_classifier(arch):
    """Backbone + 1000-class head == the official model, and within 2% of
    the paper's 29 / 50 / 89 M."""
    with torch.device('meta'):  # shapes only: skip the initialisation
        model = L2ViT(arch, out_indices=(3, ))
    width = model.embed_dims[-1]
    params = sum(p.numel() for p in model.parameters()) + width * 1000 + 1000
    assert params == OFFICIAL_PARAMS[arch]
    paper = {'tiny': 29e6, 'small': 50e6, 'base': 89e6}[arch]
    assert abs(params - paper) / paper < 0.02


# ------------------------------------------------- outputs, freeze, cp


# ---------------------------------------------------------- checkpoints
def test_convert_official_covers_every_key(official_tiny):
    model = L2ViT('tiny', out_indices=(3, ))
    converted = model.convert_official(official_tiny)
    ours = model.state_dict()
    assert sorted(k for k in converted if not k.startswith('head.')) == \
        sorted(ours)
    for key, value in ours.items():
        assert converted[key].shape == value.shape, key
    # Our own layout passes through unchanged, and so does a converted one.
    assert model.convert_official(ours) is ours
    assert model.convert_official(converted) is converted


def _save_official(path, state, ema):
    torch.save(
        {
            'model': state,
            'model_ema': ema,
            'epoch': 'best-ema',
            'optimizer': {'state': {}, 'param_groups': []},
            # As the official training script saves its options.
            'args': argparse.Namespace(model='L2ViT_Tiny', drop_path=0.1,
                                       model_ema=True),
        }, path)


def test_official_file_loads_through_init_cfg(official_tiny, tmp_path):
    ema = {k: v + 1 if v.is_floating_point() else v
           for k, v in official_tiny.items()}
    path = str(tmp_path / 'L2ViT-Tiny-checkpoint-best-ema.pth')
    _save_official(path, official_tiny, ema)

    model = L2ViT('tiny', out_indices=(3, ),
                  init_cfg=dict(type='Pretrained', checkpoint=path))
    model.init_weights()
    report = model.load_report
    assert report.missing == []
    assert sorted(report.unexpected) == ['head.bias', 'head.weight']
    assert report.mismatched == []
    state = model.state_dict()
    for official, ours in [
        ('stages.2.5.attn.temperature',
         'stages.2.blocks.5.attn.temperature'),
        ('stages.0.1.local_mp.bn.running_var',
         'stages.0.blocks.1.local_mp.norm.running_var'),
        ('stages.0.0.attn.qkv.weight',
         'stages.0.blocks.0.attn.w_msa.qkv.weight'),
        ('downsample_layers.0.proj.proj.4.weight', 'patch_embed.norm2.weight'),
        ('downsample_layers.2.proj.weight',
         'stages.2.patch_embed.proj.weight'),
        ('stages.3.0.mlp.fc2.weight',
         'stages.3.blocks.0.ffn.layers.1.weight'),
        ('norm.bias', 'norm3.bias'),
    ]:
        torch.testing.assert_close(state[ours], official_tiny[official])

    # Plain load_state_dict converts the official tensors on its own, to
    # the model init_cfg gave: loaded into that model with every tensor
    # wiped first, it computes the same.
    model.eval()
    x = torch.randn(1, 3, 45, 62)
    with torch.no_grad():
        expected = model(x)[0]
        for tensor in model.state_dict().values():
            tensor.fill_(float('nan') if tensor.is_floating_point() else 0)
    model.load_state_dict(
        {k: v for k, v in official_tiny.items() if not k.startswith('head.')},
        strict=True)
    with torch.no_grad():
        assert torch.equal(model(x)[0], expected)

    # Detection layout: the extra output norms are reported missing.
    model = L2ViT('tiny', init_cfg=dict(type='Pretrained', checkpoint=path,
                                        state_dict_key='model_ema'))
    model.init_weights()
    assert sorted(model.load_report.missing) == [
        f'norm{i}.{p}' for i in range(3) for p in ('bias', 'weight')]
    torch.testing.assert_close(model.stages[1].blocks[1].attn.temperature,
                               ema['stages.1.1.attn.temperature'])


def test_unrelated_file_raises(tmp_path):
    path = str(tmp_path / 'resnet.pth')
    torch.save({'state_dict': {'conv1.weight': torch.zeros(64, 3, 7, 7)}},
               path)
    model = L2ViT(SMALL_ARCH,
                  init_cfg=dict(type='Pretrained', checkpoint=path))
    with pytest.raises(RuntimeError, match='matches none'):
        model.init_weights()


def test_converter_script_fills_the_classifier(official_tiny, tmp_path,
                                               monkeypatch):
    """tools/model_converters/l2vit2vitattn.py: the converted file is the
    whole mmpretrain classifier (strict load), with the selected EMA
    weights."""
    from mmpretrain.registry import MODELS
    src, dst = str(tmp_path / 'official.pth'), str(tmp_path / 'ours.pth')
    ema = {k: v * 2 if v.is_floating_point() else v
           for k, v in official_tiny.items()}
    _save_official(src, official_tiny, ema)
    monkeypatch.setattr(sys, 'argv', [
        'l2vit2vitattn.py', src, dst, '--key', 'model_ema'])
    runpy.run_path('tools/model_converters/l2vit2vitattn.py',
                   run_name='__main__')
    converted = torch.load(dst)['state_dict']

    cfg = Config.fromfile('configs/l2vit/l2vit-t_32xb128_in1k.py')
    classifier = MODELS.build(cfg.model)
    classifier.load_state_dict(converted, strict=True)
    torch.testing.assert_close(classifier.head.fc.weight, ema['head.weight'])

    expected = classifier.backbone.convert_official(ema)
    for key, value in classifier.backbone.state_dict().items():
        torch.testing.assert_close(value, expected[key])


# ------------------------------------------------------ mixed precision
def test_linear_attention_fp16_autocast_stays_finite():
    """Tokens sharing a large component (as real feature maps do) make the
    fp16 sum K^T V overflow; ours runs it in fp32."""
    torch.manual_seed(0)
    attn = LinearGlobalAttention(64, 2)
    x = 8 + torch.randn(1, 100 * 160, 64)
    with torch.autocast('cpu', dtype=torch.float16):
        out, _ = attn(x)
        qkv = attn.qkv(x)
    k, v = qkv[..., 64:96], qkv[..., 128:160]
    naive = F.relu(k).transpose(-2, -1) @ v  # what fp16 alone would do
    assert naive.dtype == torch.float16 and not torch.isfinite(naive).all()
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    reference, _ = attn(x)
    torch.testing.assert_close(out.float(), reference, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize('dtype', [torch.float64, torch.float32])
def test_cpe_adds_its_map_through_the_centre_tap(dtype):
    """The full-precision CPE convolves with the identity folded into its
    centre taps: the map plus its depthwise conv, as the official
    ``proj(x) + x``, to an ulp; every gradient too; the weight and bias
    the module's own (nothing saved beyond them)."""
    from vitattn_mm.models.layers.pos_embed import \
        ConditionalPositionEncoding
    torch.manual_seed(0)
    cpe = ConditionalPositionEncoding(16, 16).to(dtype)
    x = torch.randn(2, 7 * 9, 16, dtype=dtype, requires_grad=True)
    g = torch.randn(2, 7 * 9, 16, dtype=dtype)
    out = cpe(x, (7, 9))
    grads = torch.autograd.grad(out, (x, cpe.proj.weight, cpe.proj.bias), g)
    feat = x.transpose(1, 2).reshape(2, 16, 7, 9)
    expected = (cpe.proj(feat) + feat).flatten(2).transpose(1, 2)
    expected_grads = torch.autograd.grad(
        expected, (x, cpe.proj.weight, cpe.proj.bias), g)
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else \
        dict(rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out, expected, **tol)
    for grad, reference in zip(grads, expected_grads):
        torch.testing.assert_close(grad, reference, **tol)
    assert list(cpe.state_dict()) == ['proj.weight', 'proj.bias']


def test_cpe_of_the_fp32_residual_stream_stays_fp32_under_autocast():
    """Conditional position encoding under bf16 autocast: fp32 tokens (the
    residual stream) convolve in fp32 and add to themselves, equal to the
    fp32 module, gradients too; bf16 tokens (a patch embedding's output)
    convolve in bf16, as autocast runs them."""
    from vitattn_mm.models.layers.pos_embed import \
        ConditionalPositionEncoding
    torch.manual_seed(0)
    cpe = ConditionalPositionEncoding(16, 16)
    x = torch.randn(2, 7 * 9, 16, requires_grad=True)
    expected = cpe(x, (7, 9))
    expected_grad, = torch.autograd.grad(expected.square().sum(), x)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        out = cpe(x, (7, 9))
        grad, = torch.autograd.grad(out.square().sum(), x)
        half = cpe(x.detach().bfloat16(), (7, 9))
    assert out.dtype == torch.float32 and half.dtype == torch.bfloat16
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(grad, expected_grad)
    torch.testing.assert_close(half.float(), expected, rtol=2e-2, atol=2e-2)
