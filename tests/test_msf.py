"""MSF attention and backbones: the Gaussian-kernel logits and the fused path
against naive references, grouped projections, Swin equivalence of the
softmax switch, parameter counts of paper Table 6, shapes at odd sizes,
official-checkpoint conversion, freezing, and bf16 at detection size."""
import importlib.util

import pytest
import torch
import torch.nn.functional as F
from mmpretrain.models.utils.attention import WindowMSA

from tiny_backbones import ARCHS
from vitattn_mm.models.attentions import GroupedLinear, MeanShiftAttention
from vitattn_mm.models.backbones.msf import MSFSwinTransformer, MSFViT
from vitattn_mm.models.layers import shifted_window_mask, sincos_pos_embed_2d


@pytest.fixture(autouse=True)
def one_thread(request):
    """Unit tests run tiny models, whose ops cost less than waking a second
    intra-op thread; the full-size (slow) tests keep the session's threads.
    """
    if request.node.get_closest_marker('slow'):
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


TINY_VIT = ARCHS['vit-3']


def naive_attention(attn: MeanShiftAttention, x: torch.Tensor,
                    bias=None) -> torch.Tensor:
    """Paper Eq. 12 head by head, with the Gaussian kernel written as the
    squared distance ``-||q - k||^2 / 2`` (no ``||q||^2`` cancellation)."""
    B, N, C = x.shape
    d = attn.head_dims
    parts = attn.qkv(x).view(B, N, attn.num_parts, attn.num_heads, d)
    heads = []
    for h in range(attn.num_heads):
        q, k, v = parts[:, :, 0, h], parts[:, :, 1, h], parts[:, :, 2, h]
        if attn.mean_shift:
            logits = -0.5 * torch.cdist(q, k).pow(2) * d**-0.5
        else:
            logits = q @ k.transpose(1, 2) * d**-0.5
        if bias is not None:
            logits = logits + bias[:, h]
        out = logits.softmax(dim=-1) @ v
        if attn.mean_shift:
            out = out - parts[:, :, 3, h]
        heads.append(out)
    return attn.proj(torch.cat(heads, dim=-1))


def window_bias(attn, num_images, mask):
    """Relative position bias + shift mask per window, ``(B*nW, H, N, N)``."""
    rel = attn.relative_position_bias()
    return (rel[None] + mask[:, None]).repeat(num_images, 1, 1, 1)


SHIFTED = dict(hw=(14, 7), window=(7, 7), shift=(3, 3))


def shift_mask():
    return shifted_window_mask(SHIFTED['hw'], SHIFTED['window'],
                               SHIFTED['shift'])


@pytest.mark.parametrize('fused', [True, False])
@pytest.mark.parametrize('mean_shift', [True, False])
def test_global_attention_matches_naive_reference(fused, mean_shift):
    torch.manual_seed(0)
    attn = MeanShiftAttention(24, 3, mean_shift=mean_shift,
                              fused=fused).double()
    x = torch.randn(2, 37, 24, dtype=torch.double) * 2
    expected = naive_attention(attn, x)
    out, state = attn(x)
    assert state is None
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-10)


@pytest.mark.parametrize('fused', [True, False])
@pytest.mark.parametrize('mean_shift', [True, False])
def test_window_attention_matches_naive_reference(fused, mean_shift):
    """Relative position bias and the shift mask on top of the kernel."""
    torch.manual_seed(0)
    attn = MeanShiftAttention(24, 3, window_size=(7, 7),
                              mean_shift=mean_shift, fused=fused).double()
    mask = shift_mask().double()  # 2 windows per image
    x = torch.randn(2 * mask.shape[0], 49, 24, dtype=torch.double)
    expected = naive_attention(attn, x, window_bias(attn, 2, mask))
    out, _ = attn(x, SHIFTED['window'], mask=mask)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-10)


def test_gaussian_kernel_is_not_the_dot_product_kernel():
    """The key-norm term matters: MSF logits are not q.k logits."""
    torch.manual_seed(0)
    msf = MeanShiftAttention(24, 3)
    x = torch.randn(1, 20, 24)
    q, k = msf.qkv(x).view(1, 20, 4, 3, 8)[0, :, :2].unbind(1)
    gauss = (-0.5 * torch.cdist(q[:, 0], k[:, 0])**2).softmax(-1)
    dot = (q[:, 0] @ k[:, 0].T).softmax(-1)
    assert (gauss - dot).abs().max() > 1e-2


@pytest.mark.parametrize('mean_shift', [True, False])
@pytest.mark.parametrize('windowed', [True, False])
def test_fused_path_equals_explicit_path(mean_shift, windowed):
    """Same outputs and same gradients (inputs, projections, bias table)."""
    torch.manual_seed(0)
    window = (7, 7) if windowed else None
    fused = MeanShiftAttention(48, 3, window_size=window,
                               mean_shift=mean_shift)
    explicit = MeanShiftAttention(48, 3, window_size=window,
                                  mean_shift=mean_shift, fused=False)
    explicit.load_state_dict(fused.state_dict())
    mask = shift_mask() if windowed else None
    x = torch.randn(4 if windowed else 2, 49, 48) * 3
    results = []
    for attn in (fused, explicit):
        xi = x.clone().requires_grad_()
        out, _ = attn(xi, (7, 7), mask=mask)
        out.pow(2).mean().backward()
        grads = [xi.grad] + [p.grad for p in attn.parameters()]
        results.append((out, grads))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-5,
                               atol=1e-5)
    for g_fused, g_explicit in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(g_fused, g_explicit, rtol=1e-4,
                                   atol=1e-6)


def test_softmax_switch_is_swin_window_attention():
    """``mean_shift=False`` computes exactly mmpretrain's WindowMSA."""
    torch.manual_seed(0)
    ours = MeanShiftAttention(48, 3, window_size=(7, 7), mean_shift=False)
    swin = WindowMSA(48, (7, 7), 3)
    swin.init_weights()
    ours.qkv.load_state_dict(swin.qkv.state_dict())
    ours.proj.load_state_dict(swin.proj.state_dict())
    ours.relative_position_bias.relative_position_bias_table.data.copy_(
        swin.relative_position_bias_table)
    mask = shift_mask()
    x = torch.randn(4, 49, 48)
    torch.testing.assert_close(ours(x, (7, 7), mask=mask)[0],
                               swin(x, mask=mask), rtol=1e-5, atol=1e-5)


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    """ShuffleNet's shuffle of ``(B, C, N)`` channels."""
    B, C, N = x.shape
    return x.view(B, groups, C // groups, N).transpose(1, 2).reshape(B, C, N)


def test_interleaved_grouping_is_grouped_projection_plus_channel_shuffle():
    torch.manual_seed(0)
    interleaved = GroupedLinear(16, 24, groups=2)
    block = GroupedLinear(16, 24, groups=2, mode='block')
    block.load_state_dict(interleaved.state_dict())
    x = torch.randn(3, 5, 16)

    # Grouped 1x1 convolution with the same weights: (B, C, N) layout.
    grouped = F.conv1d(x.transpose(1, 2), interleaved.weight[..., None],
                       groups=2)
    bias = interleaved.bias[None, :, None]
    torch.testing.assert_close(
        interleaved(x).transpose(1, 2),
        channel_shuffle(grouped, 2) + bias)
    torch.testing.assert_close(block(x).transpose(1, 2), grouped + bias)
    assert not torch.allclose(interleaved(x), block(x))
    # One group is a plain linear layer; the grouped one holds 1/G weights.
    assert GroupedLinear(16, 24).weight.shape == (24, 16)
    assert interleaved.weight.shape == (24, 8)


def input_groups_reached(attn: MeanShiftAttention, part: int, head: int):
    """Which input groups the gradient of one head's q/k/v/p reaches."""
    x = torch.randn(2, 6, attn.embed_dims, requires_grad=True)
    C, d = attn.embed_dims, attn.head_dims
    start = part * C + head * d
    attn.qkv(x)[..., start:start + d].sum().backward()
    per_group = x.grad.abs().sum((0, 1)).view(attn.qkv.groups, -1).sum(1)
    return (per_group > 0).tolist()


@pytest.mark.parametrize('mode', ['interleave', 'block'])
def test_grouped_heads_and_gradient_flow(mode):
    """Interleaved: every head of q, k, v and p draws on (and sends gradient
    to) every input group. Block-wise: each head on one group only."""
    torch.manual_seed(0)
    attn = MeanShiftAttention(32, 4, groups=2, group_mode=mode)
    for part in range(4):
        for head in range(4):
            reached = input_groups_reached(attn, part, head)
            if mode == 'interleave':
                assert reached == [True, True]
            else:
                assert sum(reached) == 1
    # The whole module's loss reaches every group's weights either way.
    attn.zero_grad()
    attn(torch.randn(2, 6, 32))[0].pow(2).sum().backward()
    for block in attn.qkv.weight.grad.chunk(2, dim=0):
        assert block.abs().sum() > 0


def test_grouped_linear_rejects_bad_arguments():
    with pytest.raises(ValueError, match='must divide'):
        GroupedLinear(10, 12, groups=4)
    with pytest.raises(ValueError, match='interleave'):
        GroupedLinear(8, 8, groups=2, mode='shuffle')


# Paper Table 6 (M params, 224x224 with the 1000-class head):
# (backbone, arch, mean_shift, groups) -> params.
TABLE6 = {
    ('vit', 'ti', False, 1): 5.65, ('vit', 'ti', True, 1): 6.09,
    ('vit', 'ti', True, 2): 5.20, ('vit', 'ss', False, 1): 11.30,
    ('vit', 'ss', True, 1): 12.18, ('vit', 'ss', True, 2): 10.41,
    ('vit', 's', False, 1): 21.91, ('vit', 's', True, 1): 23.68,
    ('vit', 's', True, 2): 20.14, ('vit', 'b', False, 1): 86.29,
    ('vit', 'b', True, 1): 93.37, ('vit', 'b', True, 2): 79.21,
    ('swin', 't', False, 1): 28.20, ('swin', 't', True, 1): 30.36,
    ('swin', 't', True, 2): 26.04, ('swin', 's', False, 1): 49.43,
    ('swin', 's', True, 1): 53.36, ('swin', 's', True, 2): 45.51,
}


@pytest.mark.parametrize('row', list(TABLE6), ids=str)
def test_params_match_paper_table6(row):
    family, arch, mean_shift, groups = row
    with torch.device('meta'):  # shapes only: instant for ViT-B / Swin-S
        if family == 'vit':
            backbone = MSFViT(arch, mean_shift=mean_shift, groups=groups,
                              out_type='avg_featmap')
            channels = backbone.embed_dims
        else:
            backbone = MSFSwinTransformer(arch, mean_shift=mean_shift,
                                          groups=groups, out_indices=3)
            channels = backbone.num_features[-1]
    params = sum(p.numel() for p in backbone.parameters())
    params = (params + channels * 1000 + 1000) / 1e6  # + linear head
    assert params == pytest.approx(TABLE6[row], rel=0.01)
    # The paper counts the weight matrices only (no biases, norms or bias
    # tables): that count matches to its two decimals.
    weights = sum(m.weight.numel() for m in backbone.modules()
                  if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d)))
    weights = (weights + channels * 1000) / 1e6
    assert weights == pytest.approx(TABLE6[row], abs=0.01)


def test_probe_and_grouping_parameter_arithmetic():
    """MSF adds exactly one C x C probe per block; 2 groups halve q/k/v/p."""
    def count(**kwargs):
        with torch.device('meta'):
            model = MSFViT('s', **kwargs)
        return sum(p.numel() for p in model.parameters())

    probes = 12 * 384 * 384
    assert count() - count(mean_shift=False) == probes
    assert count() - count(groups=2) == 12 * 4 * 384 * 384 // 2


@pytest.fixture(scope='module')
def tiny_vit():
    torch.manual_seed(0)
    return MSFViT(TINY_VIT, groups=2, out_indices=(0, 2)).eval()


def test_bad_arguments_raise():
    # The paper's names first, then the other names mmpretrain's ViT knows.
    with pytest.raises(KeyError, match='Valid arch names: ti, tiny, ss, s, '
                       'small, b, base, l, large, h, huge'):
        MSFViT('unknown')
    with pytest.raises(ValueError, match='pos_embed'):
        MSFViT(TINY_VIT, pos_embed='rope')
    with pytest.raises(ValueError, match='out_type'):
        MSFViT(TINY_VIT, out_type='cls_token')


def test_padded_inputs_equal_explicitly_padded_images(tiny_vit):
    """Non-multiples of 16 are zero-padded at the bottom / right."""
    x = torch.randn(1, 3, 40, 50)
    with torch.no_grad():
        padded = tiny_vit(F.pad(x, (0, 14, 0, 8)))
        auto = tiny_vit(x)
    for a, b in zip(auto, padded):
        torch.testing.assert_close(a, b)


def test_sincos_embedding_follows_the_running_grid():
    small = sincos_pos_embed_2d((14, 14), 64)
    large = sincos_pos_embed_2d((20, 30), 64)
    # Position (r, c) has the same embedding on every grid.
    torch.testing.assert_close(
        large.view(20, 30, 64)[:14, :14].reshape(-1, 64), small)
    # (sin x, cos x, sin y, cos y): the origin is 0 / 1 / 0 / 1.
    torch.testing.assert_close(
        small[0], torch.tensor([0., 1., 0., 1.]).repeat_interleave(16))
    # Columns change the first half only, rows the second half only.
    grid = small.view(14, 14, 64)
    assert torch.equal(grid[0, 1, 32:], grid[0, 0, 32:])
    assert torch.equal(grid[1, 0, :32], grid[0, 0, :32])


def test_learned_position_embedding_is_resized(tmp_path):
    torch.manual_seed(0)
    model = MSFViT(TINY_VIT, pos_embed='learned', pretrain_img_size=64)
    assert model.pos_embed.shape == (1, 16, 32)
    assert model(torch.randn(1, 3, 96, 160))[0].shape == (1, 32, 6, 10)
    # A checkpoint learned on another grid (8x8) is resized on load.
    path = tmp_path / 'learned.pth'
    torch.save({'pos_embed': torch.randn(1, 64, 32)}, path)
    # A file of the embedding alone: a deliberate partial load.
    loaded = MSFViT(TINY_VIT, pos_embed='learned', pretrain_img_size=64,
                    init_cfg=dict(type='Pretrained', checkpoint=str(path),
                                  min_loaded_ratio=0))
    loaded.init_weights()
    assert loaded.load_report.loaded == ['pos_embed']


# ----------------------------------------------- official checkpoint (ViT)
#: The official SimpleViT layout in small: its arch (tests/tiny_backbones.py)
#: with the official 4x MLP, a 5-class head and 16x16 patches.
OFFICIAL_ARCH = ARCHS['msf-simplevit-2']
OFFICIAL = dict(dim=OFFICIAL_ARCH['embed_dims'], depth=OFFICIAL_ARCH['depth'],
                heads=OFFICIAL_ARCH['num_heads'],
                mlp=4 * OFFICIAL_ARCH['embed_dims'], classes=5, patch=16)


def official_state_dict(groups: int, mean_shift: bool = True):
    """Random tensors under the official SimpleViT names and shapes."""
    torch.manual_seed(0)
    dim, patch = OFFICIAL['dim'], OFFICIAL['patch']
    parts = 4 if mean_shift else 3
    sd = {
        'to_patch_embedding.1.weight': 1 + torch.randn(3 * patch**2) / 10,
        'to_patch_embedding.1.bias': torch.randn(3 * patch**2) / 10,
        'to_patch_embedding.2.weight': torch.randn(dim, 3 * patch**2) / 30,
        'to_patch_embedding.2.bias': torch.randn(dim) / 10,
        'to_patch_embedding.3.weight': 1 + torch.randn(dim) / 10,
        'to_patch_embedding.3.bias': torch.randn(dim) / 10,
        'linear_head.0.weight': 1 + torch.randn(dim) / 10,
        'linear_head.0.bias': torch.randn(dim) / 10,
        'linear_head.1.weight': torch.randn(OFFICIAL['classes'], dim) / 8,
        'linear_head.1.bias': torch.randn(OFFICIAL['classes']) / 10,
    }
    proj = 'to_qkvp' if mean_shift else 'to_qkv'
    for i in range(OFFICIAL['depth']):
        layer = f'transformer.layers.{i}'
        sd.update({
            f'{layer}.0.norm.weight': 1 + torch.randn(dim) / 10,
            f'{layer}.0.norm.bias': torch.randn(dim) / 10,
            f'{layer}.0.{proj}.weight':
            torch.randn(parts * dim, dim // groups) / 8,
            f'{layer}.0.to_out.weight': torch.randn(dim, dim) / 8,
            f'{layer}.1.net.0.weight': 1 + torch.randn(dim) / 10,
            f'{layer}.1.net.0.bias': torch.randn(dim) / 10,
            f'{layer}.1.net.1.weight': torch.randn(OFFICIAL['mlp'], dim) / 8,
            f'{layer}.1.net.1.bias': torch.randn(OFFICIAL['mlp']) / 10,
            f'{layer}.1.net.3.weight': torch.randn(dim, OFFICIAL['mlp']) / 16,
            f'{layer}.1.net.3.bias': torch.randn(dim) / 10,
        })
    return sd


def official_forward(sd, img, groups, mean_shift=True):
    """The official SimpleViT classifier, from its description: patches in
    (row, col, channel) order, LN / Linear / LN, fixed sin-cos positions,
    pre-norm blocks with the Gaussian-kernel attention minus the probe
    (grouped projection as einsum 'bngd,ged->bneg'), mean pool, LN, Linear.
    """
    dim, heads, p = OFFICIAL['dim'], OFFICIAL['heads'], OFFICIAL['patch']
    b, c, H, W = img.shape
    h, w = H // p, W // p

    def ln(x, name):
        return F.layer_norm(x, x.shape[-1:], sd[f'{name}.weight'],
                            sd[f'{name}.bias'])

    x = img.view(b, c, h, p, w, p).permute(0, 2, 4, 3, 5, 1)
    x = ln(x.reshape(b, h * w, -1), 'to_patch_embedding.1')
    x = F.linear(x, sd['to_patch_embedding.2.weight'],
                 sd['to_patch_embedding.2.bias'])
    x = ln(x, 'to_patch_embedding.3')
    y, xx = torch.meshgrid(torch.arange(h), torch.arange(w), indexing='ij')
    omega = 1. / 10000**(torch.arange(dim // 4) / (dim // 4 - 1))
    yo, xo = y.flatten()[:, None] * omega, xx.flatten()[:, None] * omega
    x = x + torch.cat([xo.sin(), xo.cos(), yo.sin(), yo.cos()], dim=1)
    n, d = h * w, dim // heads
    proj = 'to_qkvp' if mean_shift else 'to_qkv'
    for i in range(OFFICIAL['depth']):
        layer = f'transformer.layers.{i}'
        a = ln(x, f'{layer}.0.norm')
        weight = sd[f'{layer}.0.{proj}.weight']
        e = weight.shape[0]
        qkvp = torch.einsum('bngd,ged->bneg', a.reshape(b, n, groups, -1),
                            weight.reshape(groups, e // groups, -1))
        chunks = [
            t.reshape(b, n, heads, d).transpose(1, 2)
            for t in qkvp.reshape(b, n, e).chunk(4 if mean_shift else 3, -1)
        ]
        q, k, v = chunks[:3]
        logits = q @ k.transpose(-1, -2)
        if mean_shift:
            logits = logits - 0.5 * k.pow(2).sum(-1).unsqueeze(-2)
        out = (logits * d**-0.5).softmax(-1) @ v
        if mean_shift:
            out = out - chunks[3]
        out = out.transpose(1, 2).reshape(b, n, dim)
        x = x + F.linear(out, sd[f'{layer}.0.to_out.weight'])
        f = ln(x, f'{layer}.1.net.0')
        f = F.gelu(F.linear(f, sd[f'{layer}.1.net.1.weight'],
                            sd[f'{layer}.1.net.1.bias']))
        x = x + F.linear(f, sd[f'{layer}.1.net.3.weight'],
                         sd[f'{layer}.1.net.3.bias'])
    x = ln(x.mean(dim=1), 'linear_head.0')
    return F.linear(x, sd['linear_head.1.weight'], sd['linear_head.1.bias'])


@pytest.mark.parametrize('groups,mean_shift', [(1, True), (2, True),
                                               (1, False)])
def test_official_checkpoint_loads_and_matches(tmp_path, groups,
                                               mean_shift):
    """An official SimpleViT file loads through init_cfg (converted on the
    fly) and our classifier then computes the official logits."""
    sd = official_state_dict(groups, mean_shift)
    path = tmp_path / 'official.pth'
    torch.save({'model': sd}, path)
    backbone = MSFViT(
        OFFICIAL_ARCH,
        mean_shift=mean_shift,
        groups=groups,
        out_type='avg_featmap',
        init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    backbone.init_weights()
    report = backbone.load_report
    assert report.missing == [] and report.mismatched == []
    assert sorted(report.unexpected) == ['head.fc.bias', 'head.fc.weight']

    img = torch.randn(2, 3, 64, 48)
    with torch.no_grad():
        feats = backbone.eval()(img)[-1]
        logits = F.linear(feats, sd['linear_head.1.weight'],
                          sd['linear_head.1.bias'])
        expected = official_forward(sd, img, groups, mean_shift)
    torch.testing.assert_close(logits, expected, rtol=1e-4, atol=1e-5)

    # Plain load_state_dict converts the official tensors on its own (the
    # ViT skeleton's Simple-ViT converter), to the model init_cfg gave.
    direct = MSFViT(
        OFFICIAL_ARCH,
        mean_shift=mean_shift,
        groups=groups,
        out_type='avg_featmap').eval()
    direct.load_state_dict(
        {k: v for k, v in sd.items() if not k.startswith('linear_head.1.')},
        strict=True)
    with torch.no_grad():
        assert torch.equal(direct(img)[-1], feats)
    # Conversion passes converted and own layouts through.
    once = direct.convert_official(sd)
    assert once is not sd and direct.convert_official(once) is once
    own = direct.state_dict()
    assert direct.convert_official(own) is own


def load_converter():
    spec = importlib.util.spec_from_file_location(
        'msf2vitattn', 'tools/model_converters/msf2vitattn.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_converter_output_loads_strictly_into_the_classifier():
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import MODELS

    # Earlier tests may leave another default scope (e.g. mmdet) current:
    # the classifier's parts are found in mmpretrain's registries.
    init_default_scope('mmpretrain')
    converted = load_converter().convert(official_state_dict(groups=2))
    cfg = Config.fromfile('configs/msf/msf-vit-s-g2_4xb256-300e_in1k.py')
    cfg.model.backbone.arch = dict(OFFICIAL_ARCH)
    cfg.model.head.update(in_channels=OFFICIAL['dim'],
                          num_classes=OFFICIAL['classes'])
    classifier = MODELS.build(cfg.model)
    classifier.load_state_dict(converted, strict=True)
    with pytest.raises(ValueError, match='not an official'):
        load_converter().convert({'blocks.0.attn.qkv.weight': None})


@pytest.mark.parametrize('dtype', [torch.float64, torch.bfloat16])
@pytest.mark.parametrize('case', ['shift_mask', 'boolean_mask', 'bias_only',
                                  'global'])
def test_logit_term_written_once_is_the_plain_sum(case, dtype, monkeypatch):
    """Eagerly the key-norm term, Swin's bias and the windows' mask are
    written as one tensor with its gradients in closed form
    (``MeanShiftLogitTerm``); a captured graph adds them as plain ops.
    Same attention and gradients (of the projection and the bias), also
    with a boolean mask and without bias or mask; bf16 as autocast gives
    it (bf16 projection, fp32 bias)."""
    from vitattn_mm.ops import mean_shift_attention as msa
    torch.manual_seed(0)
    windows, heads, N, d = 3, 2, 10, 8
    qkv = torch.randn(2 * windows, N, 4 * heads * d, dtype=dtype) * 2
    bias = torch.randn(heads, N, N, dtype=torch.float64 if dtype ==
                       torch.float64 else torch.float32)
    mask = {'shift_mask': torch.randn(windows, N, N).to(bias.dtype) * 10,
            'boolean_mask': torch.rand(windows, N, N) > 0.3}.get(case)
    if case == 'boolean_mask':
        mask[..., 0] = True  # every query sees a key
    if case == 'global':
        bias = None
    inputs = [t.requires_grad_() for t in (qkv, bias) if t is not None]
    g = torch.randn(2 * windows, N, heads * d, dtype=dtype)
    results = []
    for captured in (False, True):
        monkeypatch.setattr(msa, 'capturing', lambda: captured)
        out = msa.mean_shift_attention_eager(qkv, bias, mask, heads,
                                             d**-0.5, True)
        results.append((out, *torch.autograd.grad(out, inputs, g)))
    for got, want in zip(*results):
        assert got.dtype == want.dtype
        error = (got.double() - want.double()).norm() / want.double().norm()
        assert error <= (1e-12 if dtype == torch.float64 else 5e-3), error


def test_logit_term_rows_are_aligned_for_the_fused_kernel():
    """Off the CPU the term's rows start ``MASK_ALIGNMENT`` elements apart
    (the fused SDPA kernel reads it in place, no padded copy), in the
    projection's dtype; the values are the fp32 sum rounded once."""
    from vitattn_mm.models.layers.size_aware import MASK_ALIGNMENT
    from vitattn_mm.ops.mean_shift_attention import (MeanShiftLogitTerm,
                                                     key_norm_logits)
    torch.manual_seed(0)
    k = torch.randn(6, 2, 10, 8, dtype=torch.bfloat16)
    term = torch.randn(3, 2, 10, 10)
    out = MeanShiftLogitTerm.apply(k, term, 0.3, 3, torch.bfloat16,
                                   MASK_ALIGNMENT)
    assert out.shape == (6, 2, 10, 10) and out.dtype == torch.bfloat16
    assert out.stride(-2) % MASK_ALIGNMENT == 0
    want = (term + key_norm_logits(k, 0.3).unflatten(0, (2, 3))).flatten(
        0, 1)
    assert torch.equal(out, want.to(torch.bfloat16))
