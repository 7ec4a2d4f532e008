"""LaViT: Less-Attention layers, attention residual, diagonality-preserving
loss and its delivery to the trainer (numerics against naive references,
shapes at any size, checkpoints, errors, bf16)."""
import math

import pytest
import torch
import torch.nn.functional as F

from tiny_backbones import ARCHS
from vitattn_mm.models.aux_loss import (AuxLossImageClassifier,
                                        AuxLossRetinaNet, pop_aux_losses)
from vitattn_mm.models.attentions.less_attention.layers import (
    LessAttention, VanillaAttention)
from vitattn_mm.models.attentions.less_attention.loss import (
    diagonality_preserving_loss, paper_diagonality_loss)
from vitattn_mm.models.attentions.less_attention.residual import \
    AttentionResidual
from vitattn_mm.models.attentions.less_attention.state import \
    LessAttentionState
from vitattn_mm.models.attentions.less_attention.transforms import (
    ConvAttentionTransform, DenseAttentionTransform)
from vitattn_mm.models.backbones.lavit import LaViT

# Stage 2's VA layer keeps no logits, stage 3 chains two LA layers after a
# VA layer, stage 4 has a VA then an LA layer (tests/tiny_backbones.py).
TINY = ARCHS['lavit-1232']


def _is_la(block):
    return isinstance(block.attn, LessAttention)


def _la_layers(model):
    return [
        sum(_is_la(block) for block in stage.blocks)
        for stage in model.stages
    ]


def _capture_logits(model, stage):
    """Forward hooks recording the logits each block of a stage leaves in
    the state."""
    captured = {}
    for j, block in enumerate(model.stages[stage].blocks):
        block.register_forward_hook(
            lambda m, i, out, j=j: captured.__setitem__(
                j, out[1].scores() if out[1].has_scores else None))
    return captured


# ------------------------------------------------------------- arch zoo
@pytest.mark.parametrize('arch, layers, paper_params',
                         [('tiny', [0, 0, 1, 1], None),
                          ('small', [0, 0, 4, 2], 22.4),
                          ('base', [0, 2, 15, 1], 39.6)])
def test_arch_zoo_places_la_layers_from_n_la(arch, layers, paper_params):
    """N_LA read as the first LA layer of a stage; this reproduces Table 2's
    S and B classifier parameters (LaViT-T matches no reading, see
    docs/lavit.md)."""
    with torch.device('meta'):  # structure only: no memory, no init
        model = LaViT(arch, out_indices=(3, ))
    assert _la_layers(model) == layers
    # Every LA layer continues a stage: its predecessor keeps its logits.
    for stage in model.stages:
        blocks = stage.blocks
        for prev, block in zip(blocks[:-1], blocks[1:]):
            if _is_la(block) and not _is_la(prev):
                assert prev.attn.keep_logits
    if paper_params:
        params = sum(p.numel() for p in model.parameters())
        params += 512 * 1000 + 1000  # the linear classifier
        assert abs(params / 1e6 - paper_params) / paper_params < 0.015


def test_configuration_errors_are_clear():
    with pytest.raises(KeyError, match='tiny'):
        LaViT('huge')
    with pytest.raises(ValueError, match='la_start'):
        LaViT(dict(TINY, la_start=[0, 0, 1, 0]))
    with pytest.raises(ValueError, match='halve'):
        LaViT(TINY, sr_ratios=(1, 1, 1, 1))
    LaViT(TINY, sr_ratios=(1, 1, 1, 1), attn_residual=False)
    with pytest.raises(ValueError, match='la_transform'):
        LaViT(TINY, la_transform='sparse')
    with pytest.raises(ValueError, match='odd'):
        LaViT(TINY, la_kernel_size=4)


# ---------------------------------------------------- attention numerics
def _naive_reduce(attn, x, hw):
    """PVT's spatial reduction from the weights: pad the map at the bottom
    / right to a multiple of sr, strided conv, LayerNorm."""
    B, N, C = x.shape
    if attn.sr_ratio == 1:
        return x
    sr = attn.sr_ratio
    grid = x.transpose(1, 2).reshape(B, C, *hw)
    grid = F.pad(grid, (0, -hw[1] % sr, 0, -hw[0] % sr))
    conv = attn.sr
    grid = F.conv2d(grid, conv.weight, conv.bias, stride=sr)
    norm = attn.norm
    return F.layer_norm(grid.flatten(2).transpose(1, 2), (C, ), norm.weight,
                        norm.bias, norm.eps)


@pytest.mark.parametrize('keep_logits', [True, 'factors', False])
def test_vanilla_attention_matches_naive_softmax_attention(keep_logits):
    """Softmax attention over the reduced keys, plus the Attention Residual
    of the previous stage's logits (from the state), whatever is kept: the
    map an LA layer reads (built once, without the shift mask), the factors
    the next stage's residual reads (which multiply out to the naive
    logits), or nothing; gradients reach the residual."""
    torch.manual_seed(0)
    attn = VanillaAttention(32, 4, sr_ratio=2, keep_logits=keep_logits,
                            residual=dict(type='conv', in_heads=2))
    torch.nn.init.normal_(attn.residual.head_proj.weight)
    hw = (7, 9)  # odd: keys on a 4 x 5 grid
    x = torch.randn(2, 63, 32)
    prev = LessAttentionState(torch.randn(2, 2, 14 * 18, 20), (14, 18),
                              (4, 5))
    out, state = attn(x, hw, prev)
    out.sum().backward()
    grad = attn.residual.head_proj.weight.grad.clone()
    attn.zero_grad()

    heads = lambda t: t.reshape(2, -1, 4, 8).transpose(1, 2)  # noqa: E731
    q = heads(attn.q(x))
    k, v = map(heads, attn.kv(_naive_reduce(attn, x, hw)).chunk(2, dim=-1))
    bias = attn.residual(prev, hw)
    ref_logits = q @ k.transpose(-2, -1) / math.sqrt(8) + bias
    ref = (ref_logits.softmax(-1) @ v).transpose(1, 2).reshape(2, 63, 32)
    torch.testing.assert_close(out, attn.proj(ref), rtol=1e-5, atol=1e-5)
    attn.proj(ref).sum().backward()
    torch.testing.assert_close(grad, attn.residual.head_proj.weight.grad,
                               rtol=1e-4, atol=1e-5)
    if keep_logits == 'factors':
        # Kept as factors (q * scale, k, bias): no map is built here.
        assert state.logits is None
        q_kept, k_kept, bias_kept = state.factors
        torch.testing.assert_close(q_kept, q / math.sqrt(8))
        torch.testing.assert_close(k_kept, k)
        torch.testing.assert_close(bias_kept, bias)
    elif keep_logits:
        assert state.factors is None  # the map, computed once
        torch.testing.assert_close(state.logits, ref_logits, rtol=1e-5,
                                   atol=1e-5)
    if keep_logits:
        torch.testing.assert_close(state.scores(), ref_logits, rtol=1e-5,
                                   atol=1e-5)
        assert (state.query_hw, state.key_hw) == (hw, (4, 5))
    else:
        assert not state.has_scores  # older logits are not held on to


def _naive_residual(ar, logits, src_hw):
    """Eq. 6-7 as written: every key's column of logits an image on the
    query grid, through the module's own conv, GroupNorm, 1x1 conv and
    LayerScale."""
    B, h, _, Nk = logits.shape
    x = logits.permute(0, 3, 1, 2).reshape(B * Nk, h, *src_hw)
    x = F.pad(x, (0, src_hw[1] % 2, 0, src_hw[0] % 2))
    x = ar.layer_scale(ar.head_proj(ar.norm(ar.downsample(x))))
    return x.reshape(B, Nk, x.shape[1], -1).permute(0, 2, 3, 1)


@pytest.mark.parametrize('src_hw', [(14, 18), (13, 17)])
@pytest.mark.parametrize('with_bias', [True, False])
def test_attention_residual_matches_naive_with_kept_or_factored_logits(
        src_hw, with_bias):
    """From a map, and from a VA layer's factors (queries halved before
    their product with the keys; without a bias the statistics come from
    the factors), forward and gradients, odd grids, offset logits."""
    torch.manual_seed(0)
    ar = AttentionResidual(2, 3).double()
    for p in ar.parameters():
        torch.nn.init.normal_(p)
    n = src_hw[0] * src_hw[1]
    q = (torch.randn(2, 2, n, 8, dtype=torch.float64) + 1.5).requires_grad_()
    k = torch.randn(2, 2, 20, 8, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(2, 2, n, 20, dtype=torch.float64,
                       requires_grad=True) if with_bias else None
    inputs = (q, k, bias) if with_bias else (q, k)

    def logits():
        product = q @ k.transpose(-2, -1)
        return product + bias if with_bias else product

    dst_hw = tuple((s + 1) // 2 for s in src_hw)
    ref = _naive_residual(ar, logits(), src_hw)
    grads = torch.autograd.grad(ref.square().sum(), inputs)
    for state in (LessAttentionState(logits(), src_hw, (4, 5)),
                  LessAttentionState(factors=(q, k, bias),
                                     query_hw=src_hw, key_hw=(4, 5))):
        out = ar(state, dst_hw)
        torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
        for ours, theirs in zip(
                torch.autograd.grad(out.square().sum(), inputs), grads):
            torch.testing.assert_close(ours, theirs, rtol=1e-10,
                                       atol=1e-10)
    with pytest.raises(ValueError, match='query grid'):
        ar(state, (3, 3))


@pytest.mark.parametrize('grads', ['both', 'keys', 'queries'])
def test_normalised_factors_gradient_is_autograds(grads):
    """The residual's statistics from the factors with their gradient
    written out (``NormalisedFactors``) against autograd through the same
    ops (a captured graph's route), fp64, zero-padded key rows as the
    aligned keys have them, and with either output's gradient alone."""
    from vitattn_mm.models.attentions.less_attention.residual import (
        NormalisedFactors, normalised_factors)
    torch.manual_seed(0)
    q = (torch.randn(2, 3, 35, 8, dtype=torch.float64) + 1.).requires_grad_()
    k = F.pad(torch.randn(2, 3, 13, 8, dtype=torch.float64),
              (0, 0, 0, 3)).requires_grad_()
    upstream = [torch.randn(2, 3, 35, 9, dtype=torch.float64),
                torch.randn(2, 3, 16, 9, dtype=torch.float64)]
    used = dict(both=(0, 1), keys=(1, ), queries=(0, ))[grads]
    results = []
    for fn in (lambda: NormalisedFactors.apply(q, k, 1e-5)[:2],
               lambda: normalised_factors(q, k, 1e-5)[:2]):
        outs = fn()
        loss = sum((outs[i] * upstream[i]).sum() for i in used)
        results.append((*outs, *torch.autograd.grad(loss, (q, k),
                                                    allow_unused=True)))
    for ours, theirs in zip(*results):
        if theirs is None:  # the queries alone do not depend on the keys
            assert ours is None and grads == 'queries'
            continue
        torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-12)


def test_normalised_factors_keep_the_factors_dtypes():
    """bf16 factors (a VA layer's under autocast): statistics in fp32,
    outputs and gradients in bf16, within bf16's rounding of the fp64
    ones."""
    from vitattn_mm.models.attentions.less_attention.residual import \
        NormalisedFactors
    torch.manual_seed(0)
    q64 = torch.randn(2, 2, 40, 16, dtype=torch.float64) + 1.
    k64 = torch.randn(2, 2, 24, 16, dtype=torch.float64)
    upstream = [torch.randn(2, 2, 40, 17), torch.randn(2, 2, 24, 17)]
    results = []
    for dtype in (torch.bfloat16, torch.float64):
        q, k = (t.to(dtype).requires_grad_() for t in (q64, k64))
        queries, keys = NormalisedFactors.apply(q, k, 1e-5)[:2]
        assert queries.dtype == keys.dtype == dtype
        loss = sum((o.double() * u.double()).sum()
                   for o, u in zip((queries, keys), upstream))
        dq, dk = torch.autograd.grad(loss, (q, k))
        assert dq.dtype == dk.dtype == dtype
        results.append((queries, keys, dq, dk))
    for low, ref in zip(*results):
        error = (low.double() - ref).norm() / ref.norm()
        assert error < 1e-2, error


def test_lavit_with_factored_logits_matches_the_materialised_path(
        monkeypatch):
    """The whole network, train mode: outputs, ``loss_dp`` and every
    gradient as with the full map of every kept layer built and the
    residual computed per key column (Eq. 6-7 as written)."""
    torch.manual_seed(0)
    model = LaViT(TINY, drop_path_rate=0.).train()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    x = torch.randn(2, 3, 75, 101)

    def run():
        model.zero_grad()
        outs = model(x)
        loss_dp = model.pop_aux_losses()['loss_dp']
        (sum(o.square().mean() for o in outs) + loss_dp).backward()
        return ([o.detach() for o in outs], loss_dp.detach(),
                {n: p.grad for n, p in model.named_parameters()})

    outs, loss_dp, grads = run()
    monkeypatch.setattr(
        AttentionResidual, 'forward', lambda self, state, dst_hw:
        _naive_residual(self, state.scores(), state.query_hw))
    ref_outs, ref_loss_dp, ref_grads = run()
    for ours, ref in zip(outs, ref_outs):
        torch.testing.assert_close(ours, ref, rtol=0, atol=1e-5)
    torch.testing.assert_close(loss_dp, ref_loss_dp, rtol=0, atol=1e-6)
    assert grads.keys() == ref_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, ref_grads[name], rtol=1e-4,
                                   atol=1e-5, msg=name)

def test_less_attention_uses_transformed_logits_and_own_values():
    torch.manual_seed(0)
    transform = ConvAttentionTransform(4)
    attn = LessAttention(32, 4, sr_ratio=2, transform=transform)
    assert not hasattr(attn, 'q') and not hasattr(attn, 'kv')
    hw = (7, 9)
    x = torch.randn(2, 63, 32)
    prev = torch.randn(2, 4, 63, 20)
    out, state = attn(x, hw, LessAttentionState(prev, hw, (4, 5)))
    assert torch.equal(state.logits, prev)  # identity-initialised
    with pytest.raises(ValueError, match='keep_logits=True'):
        attn(x, hw, LessAttentionState())
    v = attn.v(_naive_reduce(attn, x, hw)).reshape(2, 20, 4,
                                                   8).transpose(1, 2)
    ref = (prev.softmax(-1) @ v).transpose(1, 2).reshape(2, 63, 32)
    torch.testing.assert_close(out, attn.proj(ref), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('num_heads', [1, 3])
def test_identity_initialised_transform_is_exact(num_heads):
    logits = torch.randn(2, num_heads, 7 * 9, 4 * 5) * 10
    conv = ConvAttentionTransform(num_heads)
    assert torch.equal(conv(logits, (7, 9), (4, 5)), logits)
    dense = DenseAttentionTransform((7, 9), (4, 5), (28, 36))
    assert torch.equal(dense(logits, (7, 9), (4, 5)), logits)


def test_untrained_la_layer_reproduces_previous_attention():
    """In a fresh backbone every LA layer attends exactly as the layer
    before it (chained LA layers included)."""
    torch.manual_seed(0)
    model = LaViT(TINY).eval()
    captured = _capture_logits(model, stage=2)
    with torch.no_grad():
        model(torch.randn(1, 3, 75, 101))
    assert torch.equal(captured[1], captured[0])
    assert torch.equal(captured[2], captured[0])
    assert torch.equal(captured[1].softmax(-1), captured[0].softmax(-1))


def _banded(kernel, hw):
    """The N x N matrix of a zero-padded k x k conv on an (H, W) grid, by
    enumeration: row p = output position, column q = input position."""
    H, W = hw
    k = kernel.shape[-1]
    c = k // 2
    matrix = torch.zeros(H * W, H * W)
    for y in range(H):
        for x in range(W):
            for dy in range(k):
                for dx in range(k):
                    yy, xx = y + dy - c, x + dx - c
                    if 0 <= yy < H and 0 <= xx < W:
                        matrix[y * W + x, yy * W + xx] = kernel[dy, dx]
    return matrix


def test_conv_transform_is_the_papers_form_with_banded_maps():
    """``HeadMix(QueryConv(KeyConv(A)))`` equals, per head,
    ``Psi (A Theta^T)`` with banded Theta / Psi (the paper's Eq. 5), mixed
    across heads; with one head it is exactly the dense transform."""
    torch.manual_seed(0)
    heads, q_hw, k_hw = 3, (5, 7), (3, 4)
    conv = ConvAttentionTransform(heads)
    for p in conv.parameters():
        torch.nn.init.normal_(p)
    logits = torch.randn(2, heads, 35, 12)
    out = conv(logits, q_hw, k_hw)

    per_head = []
    for h in range(heads):
        theta = _banded(conv.key_conv.weight[h, 0].detach(), k_hw)
        psi = _banded(conv.query_conv.weight[h, 0].detach(), q_hw)
        per_head.append(psi @ logits[:, h] @ theta.T)
    per_head = torch.stack(per_head, dim=1)
    mix = conv.head_mix.weight[:, :, 0, 0].detach()
    ref = torch.einsum('gh,bhqk->bgqk', mix, per_head)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)

    single = ConvAttentionTransform(1)
    for p in single.parameters():
        torch.nn.init.normal_(p)
    dense = DenseAttentionTransform(q_hw, k_hw, (20, 28))
    with torch.no_grad():
        scale = single.head_mix.weight[0, 0, 0, 0]
        dense.key_weight.copy_(_banded(single.key_conv.weight[0, 0], k_hw))
        dense.query_weight.copy_(
            scale * _banded(single.query_conv.weight[0, 0], q_hw))
    one = logits[:, :1]
    torch.testing.assert_close(
        single(one, q_hw, k_hw), dense(one, q_hw, k_hw), rtol=1e-4,
        atol=1e-4)


def test_dense_transform_serves_only_its_input_size():
    model = LaViT(TINY, la_transform='dense', pretrain_img_size=64).eval()
    transform = model.stages[2].blocks[1].attn.transform
    assert transform.query_weight.shape == (16, 16)  # 4x4 queries
    assert transform.key_weight.shape == (4, 4)  # 2x2 keys
    with torch.no_grad():
        assert model(torch.randn(1, 3, 64, 64))[2].shape[-2:] == (4, 4)
        with pytest.raises(ValueError, match=r"64x64 inputs.*'conv'"):
            model(torch.randn(1, 3, 96, 64))


def test_attention_residual_matches_naive_downsampling():
    """Per key: 2x2 stride-2 depthwise conv over the (odd, corner-padded)
    query grid, GroupNorm, head projection, LayerScale; N_q != N_k."""
    torch.manual_seed(0)
    ar = AttentionResidual(2, 5, layer_scale_init=0.3)
    torch.nn.init.normal_(ar.downsample.weight)
    src, dst, Nk = (7, 9), (4, 5), 12
    logits = torch.randn(2, 2, 63, Nk)
    out = ar(LessAttentionState(logits, src, (3, 4)), dst)
    assert out.shape == (2, 5, 20, Nk)

    grid = logits.reshape(2, 2, 7, 9, Nk)
    grid = F.pad(grid, (0, 0, 0, 1, 0, 1))  # to 8 x 10
    w = ar.downsample.weight.detach()[:, 0]  # (heads, 2, 2)
    down = sum(grid[:, :, dy::2, dx::2] * w[None, :, dy, dx, None, None, None]
               for dy in range(2) for dx in range(2))  # (B, h, 4, 5, Nk)
    mean = down.mean(dim=(1, 2, 3), keepdim=True)
    var = down.var(dim=(1, 2, 3), unbiased=False, keepdim=True)
    normed = (down - mean) / torch.sqrt(var + ar.norm.eps)
    mixed = torch.einsum('gh,bhyxk->bgyxk',
                         ar.head_proj.weight.detach()[:, :, 0, 0], normed)
    ref = 0.3 * mixed.reshape(2, 5, 20, Nk)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


# -------------------------------------------------------------- DP loss
def _local_logits(q_hw, k_hw, shift=(0., 0.), width=1.):
    """Gaussian attention of each query to the key cells around it (plus
    ``shift`` key cells), queries and keys covering the same image."""

    def centres(hw, cell):
        ys, xs = torch.meshgrid(torch.arange(hw[0]), torch.arange(hw[1]),
                                indexing='ij')
        return (torch.stack([ys, xs], -1).flatten(0, 1).float() + 0.5) * cell

    ratio = k_hw[0] / q_hw[0]
    q = centres(q_hw, ratio) + torch.tensor(shift)
    k = centres(k_hw, 1.)
    return (-((q[:, None] - k[None])**2).sum(-1) / (2 * width**2))[None,
                                                                    None]


def test_dp_loss_is_zero_for_symmetric_diagonal_maps():
    n = 16
    probs = 0.7 * torch.eye(n) + 0.3 / n
    logits = probs.log()[None, None].repeat(2, 3, 1, 1)
    assert diagonality_preserving_loss(logits, (4, 4), (4, 4)) < 1e-6
    # N_q = 4 N_k: queries attend to the key cell they lie in.
    ys, xs = torch.meshgrid(torch.arange(8), torch.arange(8), indexing='ij')
    cell = (ys // 2 * 4 + xs // 2).flatten()
    fine = 0.7 * F.one_hot(cell, n) + 0.3 / n
    assert diagonality_preserving_loss(fine.log()[None, None], (8, 8),
                                       (4, 4)) < 1e-6


def test_dp_loss_penalises_asymmetric_or_off_diagonal_maps():
    n = 16
    symmetric = 0.7 * torch.eye(n) + 0.3 / n
    shifted = symmetric.roll(1, dims=1)  # every query attends to the next
    assert diagonality_preserving_loss(shifted.log()[None, None], (4, 4),
                                       (4, 4)) > 0.5
    swapped = symmetric.clone()
    swapped[0] = swapped[0].roll(3)  # one row loses its diagonal
    loss = diagonality_preserving_loss(swapped.log()[None, None], (4, 4),
                                       (4, 4))
    assert 0.02 < loss < 0.5
    random = diagonality_preserving_loss(torch.randn(2, 3, 64, 16) * 3,
                                         (8, 8), (4, 4))
    assert random > 0.5


def test_dp_loss_does_not_grow_with_input_size():
    """The same attention pattern on ever finer grids (sums would grow
    with N^2): the loss stays put, and is bounded by 2."""
    local, moved = [], []
    for n in (8, 16, 32):
        hw = (n, n)
        local.append(diagonality_preserving_loss(
            _local_logits(hw, hw, width=n / 8), hw, hw))
        moved.append(diagonality_preserving_loss(
            _local_logits((2 * n, 2 * n), hw, (0., n / 8), width=n / 8),
            (2 * n, 2 * n), hw))
    for losses in (local, moved):
        assert max(losses) < 1.4 * min(losses)
    assert max(local) < 0.1 < 0.5 < min(moved)
    assert diagonality_preserving_loss(
        torch.randn(1, 2, 1024, 1024) * 10, (32, 32), (32, 32)) <= 2


def test_paper_dp_loss_is_eq9_as_printed():
    """dp_loss_form='paper': Eq. 9 element by element on the raw map,
    summed over heads, averaged over images; summed over LA layers
    (Eq. 10)."""
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 5, 5)
    expected = 0.
    for image in logits:
        for A in image:
            n = A.shape[0]
            for i in range(n):
                expected += sum(abs(A[i, j] - A[j, i]) for j in range(n))
                expected += (n - 1) * A[i, i] - sum(
                    A[i, j] for j in range(n) if j != i)
    torch.testing.assert_close(paper_diagonality_loss(logits, (5, 5), (5, 5)),
                               expected / 2)
    # Unbounded below, unlike the bounded form: the paper's sign rewards
    # large off-diagonal logits.
    off = 100 * (1 - torch.eye(5))[None, None]
    assert paper_diagonality_loss(off, (5, 5), (5, 5)) < -1000
    assert 0 <= diagonality_preserving_loss(off, (5, 5), (5, 5)) <= 2

    state = LessAttentionState(maps=(
        (logits, (5, 5), (5, 5), 1., 'paper', 'eager'),
        (2 * logits, (5, 5), (5, 5), 0.5, 'paper', 'eager')))
    torch.testing.assert_close(
        state.aux_losses()['loss_dp'],
        2 * paper_diagonality_loss(logits, (5, 5), (5, 5)))


def test_dp_loss_form_reaches_every_la_layer():
    model = LaViT(arch=TINY, dp_loss_form='paper', dp_loss_weight=1.)
    forms = {m.dp_loss_form for m in model.modules()
             if isinstance(m, LessAttention)}
    assert forms == {'paper'}
    with pytest.raises(ValueError, match=r"\['bounded', 'paper'\]"):
        LaViT(arch=TINY, dp_loss_form='sum')


def test_dp_loss_is_fp32_and_differentiable_under_bf16():
    logits = torch.randn(1, 2, 64, 16, requires_grad=True)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        loss = diagonality_preserving_loss(logits.bfloat16(), (8, 8), (4, 4))
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    loss.backward()
    assert logits.grad.abs().sum() > 0



@pytest.mark.parametrize('query_hw, key_hw', [
    ((8, 12), (4, 6)),  # bins of 2x2 queries (the blocks' sum)
    ((5, 7), (3, 4)),   # uneven bins (the adaptive pooling)
    ((6, 6), (6, 6)),   # square (LaViT's last stage)
])
def test_dp_loss_reads_the_probabilities_the_layer_wrote(query_hw, key_hw):
    """Given the softmax an LA layer wrote, the DP loss reads it instead
    of computing its own. fp32: the loss of the logits, value and
    gradient. bf16 under autocast (the layer's bf16 map): in fp32, the
    value within 1e-3 of the fp32 softmax of the same bf16 logits; the
    gradient differs only where the rounded map ties entries that the
    fp32 one orders (row maxima, |P_ij - P_ji|), logits closer than
    their own bf16 spacing (docs/lavit.md)."""
    from vitattn_mm.models.attentions.functional import masked_softmax
    g = torch.Generator().manual_seed(1)
    Nq, Nk = query_hw[0] * query_hw[1], key_hw[0] * key_hw[1]
    logits = (torch.randn(2, 2, Nq, Nk, generator=g) * 2).requires_grad_()

    def loss_and_grad(x, **probs):
        loss = diagonality_preserving_loss(x, query_hw, key_hw, **probs)
        return loss, torch.autograd.grad(loss, x)[0]

    expected = loss_and_grad(logits)
    got = loss_and_grad(logits, probs=logits.softmax(-1))
    torch.testing.assert_close(got, expected)

    x = logits.detach().bfloat16().requires_grad_()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        reference, ref_grad = loss_and_grad(x)
        probs = masked_softmax(x)
        assert probs.dtype == torch.bfloat16
        loss, grad = loss_and_grad(x, probs=probs)
    assert loss.dtype == torch.float32 and grad.dtype == torch.bfloat16
    assert abs(loss - reference) <= 1e-3 * reference
    cosine = F.cosine_similarity(grad.double().flatten(),
                                 ref_grad.double().flatten(), dim=0)
    assert cosine > 0.95, cosine



def test_dp_loss_of_a_stages_maps_is_each_maps_loss():
    """The mean over LA maps takes the eager maps of one shape, dtype and
    weight in one call (stacked); its value and every gradient are those
    of each map's loss, weighted and averaged (fp64: rtol 1e-12). Maps
    of three shapes, pooled and square, given as probabilities (pooled or
    not) or as logits alone, two weights."""
    from vitattn_mm.models.attentions.less_attention.loss import \
        mean_diagonality_preserving_loss
    from vitattn_mm.ops import pool_queries
    g = torch.Generator().manual_seed(0)

    def logits(Nq, Nk, heads=2):
        return (torch.randn(2, heads, Nq, Nk, generator=g, dtype=torch.double)
                * 2).requires_grad_()

    pooled, square = ((8, 12), (4, 6)), ((4, 6), (4, 6))
    entries = [logits(96, 24) for _ in range(3)] + [logits(24, 24)
                                                    for _ in range(3)]
    grids = [pooled] * 3 + [square] * 3
    probs = [pool_queries(entries[0].softmax(-1), *pooled),
             entries[1].softmax(-1), None, entries[3].softmax(-1), None,
             entries[5].softmax(-1)]
    weights = [0.1, 0.1, 0.1, 0.1, 0.1, 0.3]
    # A third shape: three heads.
    entries.append(logits(24, 24, heads=3))
    grids.append(square)
    probs.append(None)
    weights.append(0.1)
    maps = [(x, *hw, w, 'eager', p)
            for x, hw, w, p in zip(entries, grids, weights, probs)]
    expected = sum(w * diagonality_preserving_loss(x, *hw, probs=p)
                   for x, hw, w, p in zip(entries, grids, weights, probs)
                   ) / len(maps)
    got = mean_diagonality_preserving_loss(maps)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=0)
    for a, b in zip(torch.autograd.grad(got, entries, retain_graph=True),
                    torch.autograd.grad(expected, entries)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize('form', ['bounded', 'paper'])
@pytest.mark.parametrize('grids', [((3, 4), (3, 4)), ((4, 6), (2, 3))],
                         ids=['square', 'pooled'])
def test_dp_loss_of_fp64_logits_is_fp64_and_passes_gradcheck(form, grids):
    """fp64 logits keep fp64 through the loss (it upcasts bf16 and fp16
    to fp32, and took fp64 down to fp32 before): its value is fp64 and
    its gradient passes torch's finite-difference check."""
    from vitattn_mm.models.attentions.less_attention.loss import \
        DP_LOSS_FORMS
    loss = DP_LOSS_FORMS[form]
    Nq, Nk = (math.prod(hw) for hw in grids)
    logits = torch.randn(2, 2, Nq, Nk, dtype=torch.double,
                         generator=torch.Generator().manual_seed(0),
                         requires_grad=True)
    assert loss(logits, *grids).dtype == torch.float64
    assert torch.autograd.gradcheck(lambda x: loss(x, *grids), (logits, ))


def test_la_layers_hand_their_softmax_to_the_dp_loss(dp_loss_calls):
    """In a training pass each LA layer gives the DP loss the map its
    eager softmax wrote (the loss computes no softmax of its own), its
    queries pooled onto the key grid where the grids differ (beside the
    product with the values, which then reads the map through the
    pooling), and the loss is the loss of its logits."""
    from vitattn_mm.ops import pool_queries
    torch.manual_seed(0)
    model = LaViT(TINY).train()
    model(torch.randn(1, 3, 64, 96))
    assert len(dp_loss_calls) == 3
    pooled = 0
    for logits, query_hw, key_hw, probs in dp_loss_calls:
        expected = logits.softmax(-1)
        if tuple(query_hw) != tuple(key_hw):
            expected = pool_queries(expected, query_hw, key_hw)
            pooled += 1
        torch.testing.assert_close(probs, expected)
    assert pooled == 2

# ------------------------------------------------- aux loss in training
def test_backbone_keeps_dp_loss_only_while_training():
    torch.manual_seed(0)
    model = LaViT(TINY, dp_loss_weight=0.5)
    x = torch.randn(2, 3, 64, 96)
    model.train()
    model(x)
    losses = model.pop_aux_losses()
    assert set(losses) == {'loss_dp'}
    assert losses['loss_dp'].requires_grad and losses['loss_dp'] > 0
    assert model.pop_aux_losses() == {}  # popping clears

    with torch.no_grad():
        model(x)
    assert model.pop_aux_losses() == {}
    model(x)
    model.eval()
    model(x)  # an eval pass drops the stale training loss
    assert model.pop_aux_losses() == {}

    for kwargs in (dict(dp_loss_weight=0.), dict(less_attention=False)):
        other = LaViT(TINY, **kwargs).train()
        other(x)
        assert other.pop_aux_losses() == {}


def test_dp_loss_weight_scales_the_mean_over_la_layers():
    torch.manual_seed(0)
    model = LaViT(TINY, dp_loss_weight=1.).train()
    maps = {}
    for stage in (2, 3):
        maps[stage] = _capture_logits(model, stage)
    x = torch.randn(1, 3, 64, 96)
    model(x)
    # Stage 3 (index 2): 16x24 -> queries 4x6, keys 2x3; stage 4: 2x3.
    expected = (diagonality_preserving_loss(maps[2][1], (4, 6), (2, 3)) +
                diagonality_preserving_loss(maps[2][2], (4, 6), (2, 3)) +
                diagonality_preserving_loss(maps[3][1], (2, 3), (2, 3))) / 3
    torch.testing.assert_close(model.pop_aux_losses()['loss_dp'], expected)


def test_with_cp_gives_the_same_outputs_dp_loss_and_gradients():
    torch.manual_seed(0)
    plain = LaViT(TINY, drop_path_rate=0.).train()
    ckpt = LaViT(TINY, drop_path_rate=0., with_cp=True).train()
    ckpt.load_state_dict(plain.state_dict())
    x = torch.randn(1, 3, 64, 96, requires_grad=True)
    results = []
    for model in (plain, ckpt):
        outs = model(x)
        dp = model.pop_aux_losses()['loss_dp']
        (sum(o.mean() for o in outs) + dp).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        results.append((outs, dp, grads))
    (outs0, dp0, g0), (outs1, dp1, g1) = results
    for a, b in zip(outs0, outs1):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(dp0, dp1)
    for name in g0:
        torch.testing.assert_close(g0[name], g1[name], rtol=1e-4, atol=1e-6)


@pytest.fixture(scope='module')
def retinanet():
    from mmengine.config import Config
    from mmengine.registry import MODELS, init_default_scope
    cfg = Config.fromfile('configs/lavit/retinanet_lavit-t_fpn_1x_coco.py')
    cfg.model.backbone.update(arch=TINY, init_cfg=None)
    # A narrow neck and head: the subject is the backbone's loss delivery.
    cfg.model.neck.update(in_channels=[32, 64, 128], out_channels=32)
    cfg.model.bbox_head.update(
        in_channels=32, feat_channels=32, stacked_convs=1)
    init_default_scope('mmdet')
    return MODELS.build(cfg.model)


def _det_batch(model, training=True):
    from mmdet.testing import demo_mm_inputs
    packed = demo_mm_inputs(2, [[3, 96, 128]] * 2, num_items=[2, 3],
                            num_classes=80)
    return model.data_preprocessor(packed, training)


def test_detector_loss_dict_has_loss_dp_and_gradients_reach_la_and_ar(
        retinanet):
    assert isinstance(retinanet, AuxLossRetinaNet)
    torch.manual_seed(0)
    retinanet.train()
    retinanet.zero_grad()
    losses = retinanet(**_det_batch(retinanet), mode='loss')
    assert {'loss_cls', 'loss_bbox', 'loss_dp'} <= set(losses)
    total, log_vars = retinanet.parse_losses(losses)
    assert 'loss_dp' in log_vars  # what the Runner logs
    total.backward()
    backbone = retinanet.backbone
    la = backbone.stages[2].blocks[1].attn.transform
    params = [la.key_conv.weight, la.query_conv.weight, la.head_mix.weight]
    # Into a VA layer keeping no logits (stage 1) and ones keeping them.
    for stage in (1, 2, 3):
        ar = backbone.stages[stage].blocks[0].attn.residual
        params += [
            ar.downsample.weight, ar.head_proj.weight, ar.layer_scale.weight
        ]
    assert not backbone.stages[1].blocks[0].attn.keep_logits
    for param in params:
        assert param.grad is not None and param.grad.abs().sum() > 0
    assert backbone.pop_aux_losses() == {}


def test_dp_loss_alone_trains_the_la_transform(retinanet):
    retinanet.train()
    retinanet.zero_grad()
    retinanet(**_det_batch(retinanet), mode='loss')['loss_dp'].backward()
    la = retinanet.backbone.stages[3].blocks[1].attn.transform
    assert la.key_conv.weight.grad.abs().sum() > 0


def test_tensor_and_predict_modes_keep_nothing(retinanet):
    data = _det_batch(retinanet, training=False)
    retinanet.train()  # even in training mode
    retinanet(data['inputs'], mode='tensor')
    assert retinanet.backbone._aux_losses is None
    retinanet.eval()
    with torch.no_grad():
        retinanet(**data, mode='predict')
    assert retinanet.backbone._aux_losses is None


def test_aux_loss_models_accept_any_backbone():
    from mmengine.registry import MODELS, init_default_scope
    from mmpretrain.structures import DataSample
    init_default_scope('mmpretrain')
    samples = [DataSample().set_gt_label(1), DataSample().set_gt_label(2)]
    inputs = torch.randn(2, 3, 32, 32)
    for backbone, keys in ((dict(type='LaViT', arch=TINY, out_indices=(3, )),
                            {'loss_cls', 'loss_dp'}),
                           (dict(type='ResNet', depth=18), {'loss'})):
        channels = 128 if backbone['type'] == 'LaViT' else 512
        model = MODELS.build(
            dict(
                type='AuxLossImageClassifier',
                backbone=backbone,
                neck=dict(type='GlobalAveragePooling'),
                head=dict(
                    type='LinearClsHead', num_classes=3,
                    in_channels=channels)))
        assert isinstance(model, AuxLossImageClassifier)
        losses = model.loss(inputs, samples)
        assert set(losses) == keys
        # The logged `loss` is the back-propagated total, not the head's.
        total, log_vars = model.parse_losses(losses)
        torch.testing.assert_close(log_vars['loss'], total)
        torch.testing.assert_close(total, sum(losses.values()))
    assert pop_aux_losses(torch.nn.Linear(1, 1)) == {}


# ----------------------------------------------------------- checkpoints
def test_classifier_checkpoint_loads_into_detection_backbone(tmp_path):
    """An mmpretrain LaViT checkpoint (``backbone.`` keys, a head) fills
    every backbone key of a detection backbone."""
    torch.manual_seed(0)
    source = LaViT(TINY)
    state = {f'backbone.{k}': v for k, v in source.state_dict().items()}
    state['head.fc.weight'] = torch.zeros(3, 128)
    path = str(tmp_path / 'lavit_cls.pth')
    torch.save({'state_dict': state}, path)
    target = LaViT(TINY, init_cfg=dict(type='Pretrained', checkpoint=path))
    target.init_weights()
    report = target.load_report
    assert not report.missing and not report.mismatched
    assert not report.unexpected  # the head is not the backbone's
    assert len(report.loaded) == len(source.state_dict())
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        for a, b in zip(source.eval()(x), target.eval()(x)):
            torch.testing.assert_close(a, b)


@pytest.mark.slow
def test_bf16_autocast_full_resolution_is_finite():
    """LaViT-S's widths and its third stage (VA layers, then LA layers
    from the fourth block) at 800x1280 in bf16; one block in the other
    stages keeps it short."""
    torch.manual_seed(0)
    arch = dict(LaViT.parse_arch('small'), depths=[1, 1, 6, 1],
                la_start=[0, 0, 3, 0])
    model = LaViT(arch).eval()
    la_logits = _capture_logits(model, stage=2)
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        outs = model(torch.randn(1, 3, 800, 1280))
        loss = diagonality_preserving_loss(la_logits[5], (50, 80), (25, 40))
    assert [o.shape[-2:] for o in outs] == [(200, 320), (100, 160),
                                            (50, 80), (25, 40)]
    assert all(torch.isfinite(o).all() for o in outs)
    assert la_logits[5].dtype == torch.bfloat16  # attention ran in bf16
    assert loss.dtype == torch.float32 and torch.isfinite(loss)

