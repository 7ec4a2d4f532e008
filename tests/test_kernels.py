"""The fused attention kernels (``vitattn_mm.ops``) against their eager
compositions, run on the CPU in Triton's interpreter.

``TRITON_INTERPRET=1`` is set (tests/conftest.py) before anything imports
triton, so the custom ops run their Triton kernels on CPU tensors here: forward and every
gradient, at odd token counts, with keys on another grid than the queries
(spatial reduction), several heads and head widths that are no power of
two. Tolerances, as relative RMSE against the eager composition on the
same inputs: 1e-5 in fp32, 5e-3 in bf16 and fp16.
"""
import os

import pytest
import torch
import torch.nn.functional as F

from vitattn_mm.ops import (focused_linear_attention_eager,
                            focused_linear_attention_op,
                            focused_linear_attention_with_sums,
                            kernels_run_on,
                            diagonality_loss_eager, diagonality_loss_op,
                            pooled_diagonality_loss_eager,
                            pooled_diagonality_loss_op,
                            mean_shift_attention_eager,
                            mean_shift_attention_op,
                            mean_shift_attention_with_lse,
                            relu_linear_attention_eager,
                            relu_linear_attention_op,
                            relu_linear_attention_with_sums, score_conv_eager,
                            score_conv_op, softmax_apply_dp_eager,
                            softmax_apply_dp_op, softmax_apply_eager,
                            softmax_apply_op, softmax_apply_with_dp_loss,
                            softmax_apply_with_lse)
from vitattn_mm.models.layers import shifted_window_mask

pytestmark = pytest.mark.skipif(
    not kernels_run_on(torch.device('cpu')),
    reason='triton does not import, or TRITON_INTERPRET was set to 0')

TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 5e-3, torch.float16: 5e-3}


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def relative_rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return ((a - b).pow(2).mean().sqrt() /
            b.pow(2).mean().sqrt().clamp_min(1e-30)).item()


def compare(op, eager, inputs, constants, autocast=None):
    """Forward and every input's gradient of ``op`` against ``eager``: the
    relative errors by name ('out', then the input's index).

    With ``autocast`` (a low-precision dtype) the op runs under CPU
    autocast on the inputs as given, as a model runs it, and the reference
    is the eager composition in fp32 on the same values: the error is then
    the op's own rounding, not the sum of two roundings.
    """
    def leaves(fp32=False):
        return [None if t is None else
                (t.float() if fp32 and t.is_floating_point() else
                 t).detach().clone().requires_grad_() for t in inputs]

    fused, reference = leaves(), leaves(fp32=autocast is not None)
    with torch.autocast('cpu', dtype=autocast, enabled=autocast is not None):
        out = op(*fused, *constants)
    ref = eager(*reference, *constants)
    if autocast is None:
        assert out.dtype == ref.dtype
    assert out.shape == ref.shape
    assert torch.isfinite(ref).all()
    # Its own generator: the draw must not depend on the tests run before.
    grad = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1),
                       dtype=ref.dtype)
    # The reference gets the same (rounded) upstream gradient: the error
    # is the op's own, here too.
    grad = grad.to(out.dtype)
    out.backward(grad)
    ref.backward(grad.to(ref.dtype))
    errors = {'out': relative_rmse(out, ref)}
    for i, (a, b) in enumerate(zip(fused, reference)):
        if a is not None:
            assert a.grad is not None and b.grad is not None, i
            assert torch.isfinite(a.grad).all(), i
            errors[i] = relative_rmse(a.grad, b.grad)
    return errors


class NoLaunch:
    """A forward kernel's stand-in for a backward, which must not launch
    it."""

    def __getitem__(self, grid):
        raise AssertionError('a forward kernel ran in the backward')


def focused_inputs(B=2, hw=(5, 7), C=48, heads=2, kv_tokens=None,
                   dtype=torch.float32, scale=1., kernel=5, seed=0):
    """Inputs of the focused op: ``kv_tokens`` keys (default: the query
    grid) and, when they differ, a value map on the query grid."""
    g = torch.Generator().manual_seed(seed)
    N = hw[0] * hw[1]
    n = N if kv_tokens is None else kv_tokens
    d = C // heads

    def randn(*shape, s=1.):
        return (torch.randn(*shape, generator=g) * s)

    q = randn(B, N, C, s=scale).to(dtype)
    kv = randn(B, n, 2 * C, s=scale).to(dtype)
    pos = randn(1, n, C, s=0.1)
    s = F.softplus(randn(1, 1, C, s=0.3))
    v_map = None if kv_tokens is None else randn(B, C, *hw).to(dtype)
    weight, bias = randn(d, 1, kernel, kernel, s=0.1), randn(d, s=0.1)
    return [q, kv, pos, s, v_map, weight, bias], [list(hw), heads, 3.]


@pytest.mark.parametrize('case', [
    dict(),  # values on the query grid, the conv on them
    dict(kv_tokens=6),  # spatial reduction: 6 keys, a value map
    dict(hw=(3, 11), C=72, heads=3),  # head width 24, 3 heads
    dict(hw=(1, 3), C=32, heads=1, kernel=3),  # one row, a 3x3 conv
    # Head width 40: the backward's products over the state in 32-channel
    # chunks, the second one partly masked; keys reduced.
    dict(hw=(3, 7), C=80, heads=2, kv_tokens=9),
])
def test_focused_linear_attention_fp32(case):
    inputs, constants = focused_inputs(**case)
    errors = compare(focused_linear_attention_op,
                     focused_linear_attention_eager, inputs, constants)
    assert max(errors.values()) <= 1e-5, errors
    assert set(errors) == {'out', 0, 1, 2, 3, 5, 6} | (
        {4} if inputs[4] is not None else set())


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_focused_linear_attention_low_precision(dtype):
    inputs, constants = focused_inputs(kv_tokens=10, dtype=dtype)
    errors = compare(focused_linear_attention_op,
                     focused_linear_attention_eager, inputs, constants,
                     autocast=dtype)
    assert max(errors.values()) <= TOLERANCE[dtype], errors


def test_focused_linear_attention_fp16_large_inputs_stay_finite():
    """x**3 of inputs of 1e3 overflows fp16: the kernels work in fp32,
    as the eager path does; both stay finite and agree."""
    inputs, constants = focused_inputs(dtype=torch.float16, scale=1e3)
    errors = compare(focused_linear_attention_op,
                     focused_linear_attention_eager, inputs, constants,
                     autocast=torch.float16)
    assert max(errors.values()) <= TOLERANCE[torch.float16], errors


def test_linear_attention_backward_runs_no_forward_kernel(monkeypatch):
    """The linear attentions' backward reads the sums their forward
    returned beside the output (fp32, not differentiable): neither the
    state kernel nor the output kernel runs in it, and the gradients are
    the eager composition's (FLatten with a spatial reduction, L2ViT)."""
    from vitattn_mm.ops import triton_linear_attention

    cases = [(focused_linear_attention_op, focused_linear_attention_eager,
              *focused_inputs(kv_tokens=6)),
             (relu_linear_attention_op, relu_linear_attention_eager,
              relu_inputs(), [3, 100.])]
    for op, eager, inputs, constants in cases:
        leaves = [None if t is None else t.clone().requires_grad_()
                  for t in inputs]
        out = op(*leaves, *constants)
        with monkeypatch.context() as patch:
            for kernel in ('state_kernel', 'output_kernel'):
                patch.setattr(triton_linear_attention, kernel, NoLaunch())
            out.backward(torch.ones_like(out))
        refs = [None if t is None else t.clone().requires_grad_()
                for t in inputs]
        eager(*refs, *constants).backward(torch.ones_like(out))
        for a, b in zip(leaves, refs):
            if a is not None:
                assert relative_rmse(a.grad, b.grad) <= 1e-5


def relu_inputs(B=2, N=37, C=48, heads=3, dtype=torch.float32, scale=1.,
                seed=0):
    g = torch.Generator().manual_seed(seed)
    qkv = (torch.randn(B, N, 3 * C, generator=g) * scale).to(dtype)
    temperature = torch.rand(heads, 1, 1, generator=g) + 0.5
    return [qkv, temperature]


@pytest.mark.parametrize('denominator_min', [100., 1.])
def test_relu_linear_attention_fp32(denominator_min):
    """With the floor of 100 most rows are clamped at this size, with 1
    none are: both branches of the normaliser's gradient."""
    errors = compare(relu_linear_attention_op, relu_linear_attention_eager,
                     relu_inputs(), [3, denominator_min])
    assert max(errors.values()) <= 1e-5, errors
    assert set(errors) == {'out', 0, 1}


def test_relu_linear_attention_of_wide_heads_fp32():
    """Head width 40: the backward's products over the state in two
    32-channel chunks, the second one partly masked."""
    errors = compare(relu_linear_attention_op, relu_linear_attention_eager,
                     relu_inputs(N=19, C=80, heads=2), [2, 1.])
    assert max(errors.values()) <= 1e-5, errors


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_relu_linear_attention_low_precision(dtype):
    errors = compare(relu_linear_attention_op, relu_linear_attention_eager,
                     relu_inputs(dtype=dtype, N=21, heads=2), [2, 10.],
                     autocast=dtype)
    assert max(errors.values()) <= TOLERANCE[dtype], errors


def test_relu_linear_attention_fp16_large_inputs_stay_finite():
    errors = compare(relu_linear_attention_op, relu_linear_attention_eager,
                     relu_inputs(dtype=torch.float16, scale=1e3), [3, 100.],
                     autocast=torch.float16)
    assert max(errors.values()) <= TOLERANCE[torch.float16], errors


def mean_shift_inputs(B=4, N=49, C=64, heads=2, mean_shift=True,
                      bias=True, dtype=torch.float32, scale=1., seed=0):
    g = torch.Generator().manual_seed(seed)
    parts = 4 if mean_shift else 3
    qkv = (torch.randn(B, N, parts * C, generator=g) * scale).to(dtype)
    table = torch.randn(heads, N, N, generator=g) * 0.5 if bias else None
    return [qkv, table]


@pytest.mark.parametrize('mean_shift', [True, False])
@pytest.mark.parametrize('where', ['global', 'window', 'shifted window'])
def test_mean_shift_attention_fp32(mean_shift, where):
    """Global (no bias), in windows (Swin's relative position bias), in
    shifted windows (and Swin's mask: 2 windows an image, 2 images)."""
    inputs = mean_shift_inputs(mean_shift=mean_shift,
                               bias=where != 'global')
    mask = shifted_window_mask((14, 7), (7, 7), (3, 3), 'cpu') \
        if where == 'shifted window' else None
    errors = compare(mean_shift_attention_op, mean_shift_attention_eager,
                     inputs, [mask, 2, 32**-0.5, mean_shift])
    assert max(errors.values()) <= 1e-5, errors
    assert set(errors) == {'out', 0} | ({1} if where != 'global' else set())


def test_mean_shift_attention_over_several_tiles():
    """70 tokens (two query and two key tiles of 64), head width 24."""
    inputs = mean_shift_inputs(B=2, N=70, C=48, bias=False)
    errors = compare(mean_shift_attention_op, mean_shift_attention_eager,
                     inputs, [None, 2, 24**-0.5, True])
    assert max(errors.values()) <= 1e-5, errors


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_mean_shift_attention_low_precision(dtype):
    inputs = mean_shift_inputs(B=2, N=23, heads=2, dtype=dtype)
    errors = compare(mean_shift_attention_op, mean_shift_attention_eager,
                     inputs, [None, 2, 32**-0.5, True], autocast=dtype)
    assert max(errors.values()) <= TOLERANCE[dtype], errors


def test_mean_shift_attention_fp16_finite_where_eager_is():
    """Inputs of 1e3: the logits (~1e6) leave fp16's range in the eager
    composition (an fp16 SDPA on the CPU), which is then wrong or not
    finite; the kernels keep the logits and the softmax in fp32. The fused
    output is finite wherever the eager one is (here: everywhere)."""
    qkv, table = mean_shift_inputs(B=2, N=16, dtype=torch.float16,
                                   scale=1e3)
    args = [None, 2, 32**-0.5, True]
    with torch.autocast('cpu', dtype=torch.float16):
        fused = mean_shift_attention_op(qkv, table, *args)
        eager = mean_shift_attention_eager(qkv, table, *args)
    assert torch.isfinite(fused[torch.isfinite(eager)]).all()
    assert torch.isfinite(fused).all()


@pytest.mark.parametrize('case', [
    dict(heads=2, query_hw=(3, 5), key_hw=(2, 3)),  # PVT: keys reduced
    dict(heads=1, query_hw=(4, 4), key_hw=(4, 4)),  # Swin's windows
    dict(heads=1, query_hw=(2, 5), key_hw=(3, 3), kernel=5),
    dict(heads=1, query_hw=(4, 5), key_hw=(7, 10)),  # 2 x 2 tiles
    dict(heads=2, query_hw=(3, 4), key_hw=(2, 2), dtypes=True),
    # The 1x1 head mix folded into the query conv (dense over the heads):
    # keys reduced, 3 heads; 2 x 2 tiles; low precision.
    dict(heads=3, query_hw=(3, 5), key_hw=(2, 3), mix=True),
    dict(heads=2, query_hw=(4, 5), key_hw=(7, 10), mix=True),
    dict(heads=2, query_hw=(3, 4), key_hw=(2, 2), mix=True, dtypes=True),
])
def test_score_conv(case):
    """Less-Attention's two depthwise convolutions of every head's map,
    and with the head mix folded in (tiles of 16 queries x 64 keys; the
    interpreter takes seconds a tile, so the maps are small)."""
    g = torch.Generator().manual_seed(0)
    h, kernel = case['heads'], case.get('kernel', 3)
    Nq = case['query_hw'][0] * case['query_hw'][1]
    Nk = case['key_hw'][0] * case['key_hw'][1]
    inputs = [torch.randn(1, h, Nq, Nk, generator=g),
              torch.randn(h, 1, kernel, kernel, generator=g),
              torch.randn(h, 1, kernel, kernel, generator=g)]
    constants = [list(case['query_hw']), list(case['key_hw'])]
    op, eager = score_conv_op, score_conv_eager
    if case.get('mix'):  # the mix among the tensors compared
        inputs.append(torch.randn(h, h, 1, 1, generator=g))
        op, eager = with_head_mix(op), with_head_mix(eager)
    errors = compare(op, eager, inputs, constants)
    assert max(errors.values()) <= 1e-5, errors
    assert set(errors) == {'out', *range(len(inputs))}
    for dtype in (torch.bfloat16, torch.float16) if case.get('dtypes') \
            else ():
        low = [inputs[0].to(dtype), *inputs[1:]]
        errors = compare(op, eager, low, constants, autocast=dtype)
        assert max(errors.values()) <= TOLERANCE[dtype], (dtype, errors)


def with_head_mix(function):
    """``function`` of the score convs taking the head mix after the
    kernels, among the tensors (``compare`` differentiates those)."""
    def call(logits, key_weight, query_weight, head_mix, query_hw, key_hw):
        return function(logits, key_weight, query_weight, query_hw, key_hw,
                        head_mix)
    return call


@pytest.mark.parametrize('case', [
    dict(B=2, heads=3, Nq=35, Nk=12, d=32),  # queries on a larger grid
    dict(B=2, heads=2, Nq=70, Nk=130, d=24),  # several tiles each way
    dict(B=4, heads=2, Nq=49, Nk=49, d=32, shifted=True),  # Swin's mask
])
def test_softmax_apply(case):
    """``softmax(logits + mask) v`` on given logits, values strided as
    the layers pass them."""
    g = torch.Generator().manual_seed(0)
    B, h, Nq, Nk, d = (case[k] for k in ('B', 'heads', 'Nq', 'Nk', 'd'))
    logits = torch.randn(B, h, Nq, Nk, generator=g) * 2
    v = torch.randn(B, Nk, h, d, generator=g).transpose(1, 2)
    mask = shifted_window_mask((14, 7), (7, 7), (3, 3), 'cpu') \
        if case.get('shifted') else None
    errors = compare(softmax_apply_op, softmax_apply_eager, [logits, v],
                     [mask])
    assert max(errors.values()) <= 1e-5, errors
    for dtype in (torch.bfloat16, torch.float16):
        errors = compare(softmax_apply_op, softmax_apply_eager,
                         [logits.to(dtype), v.to(dtype)], [mask],
                         autocast=dtype)
        assert max(errors.values()) <= TOLERANCE[dtype], (dtype, errors)


def test_softmax_apply_backward_reads_the_forwards_lse(monkeypatch):
    """The forward writes the rows' fp32 log-sum-exp of the masked logits
    beside its output, and the backward reads them (and the output, for
    ``delta = dout . out``) instead of sweeping the logits again: no
    forward kernel runs in the backward, and the gradients are the eager
    composition's."""
    from vitattn_mm.ops import triton_softmax_apply
    g = torch.Generator().manual_seed(0)
    mask = shifted_window_mask((14, 7), (7, 7), (3, 3), 'cpu')
    logits = (torch.randn(4, 2, 49, 49, generator=g) * 2).requires_grad_()
    v = torch.randn(4, 2, 49, 16, generator=g).requires_grad_()
    out, lse = softmax_apply_with_lse(logits, v, mask)
    masked = (logits.detach().view(2, 2, 2, 49, 49) + mask[:, None]).view(
        4, 2, 49, 49)
    torch.testing.assert_close(lse, masked.logsumexp(-1).flatten(0, 1))
    assert not lse.requires_grad

    monkeypatch.setattr(triton_softmax_apply, 'forward_kernel', NoLaunch())
    grad = torch.randn(out.shape, generator=g)
    dlogits, dv = torch.autograd.grad(out, (logits, v), grad)
    ref = softmax_apply_eager(logits, v, mask)
    ref_dlogits, ref_dv = torch.autograd.grad(ref, (logits, v), grad)
    assert relative_rmse(dlogits, ref_dlogits) <= 1e-5
    assert relative_rmse(dv, ref_dv) <= 1e-5


def test_mean_shift_attention_backward_reads_the_forwards_lse(monkeypatch):
    """The forward returns its rows' log-sum-exp (fp32, not
    differentiable) and the backward reads it: no forward kernel runs in
    the backward, and the gradients (of qkv and of the bias, in shifted
    windows) are the eager composition's."""
    from vitattn_mm.ops import triton_mean_shift_attention
    mask = shifted_window_mask((14, 7), (7, 7), (3, 3), 'cpu')
    inputs, constants = mean_shift_inputs(), [mask, 2, 32**-0.5, True]
    leaves = [t.clone().requires_grad_() for t in inputs]
    out, lse = mean_shift_attention_with_lse(*leaves, *constants)
    assert lse.shape == (4 * 2, 49) and lse.dtype == torch.float32
    assert not lse.requires_grad

    monkeypatch.setattr(triton_mean_shift_attention, 'forward_kernel',
                        NoLaunch())
    out.backward(torch.ones_like(out))
    refs = [t.clone().requires_grad_() for t in inputs]
    mean_shift_attention_eager(*refs, *constants).backward(
        torch.ones_like(out))
    for a, b in zip(leaves, refs):
        assert relative_rmse(a.grad, b.grad) <= 1e-5


@pytest.mark.parametrize('case', [
    dict(query_hw=(8, 6), key_hw=(4, 3), heads=2, d=16),  # bins of 2x2
    # Uneven bins that overlap, 2 query blocks of 64, head width 24.
    dict(query_hw=(9, 10), key_hw=(3, 4), heads=3, d=24),
    # 40 keys: 2 key blocks of 32; 60 queries: rows past the last.
    dict(query_hw=(6, 10), key_hw=(5, 8), heads=1, d=8),
    dict(query_hw=(3, 4), key_hw=(3, 4), heads=2, d=16),  # bins of one
])
def test_softmax_apply_with_dp_loss(case):
    """An LA layer's softmax applied to its values and the bounded DP loss
    of that softmax pooled onto the key grid, as one op, against the two
    eager compositions: the output, the loss, and the logits' one
    gradient (from the output's and the loss's) and the values'; with
    the loss's gradient alone and the output's alone too."""
    g = torch.Generator().manual_seed(0)
    (Hq, Wq), (Hk, Wk) = case['query_hw'], case['key_hw']
    logits = torch.randn(2, case['heads'], Hq * Wq, Hk * Wk, generator=g) * 2
    v = torch.randn(2, Hk * Wk, case['heads'], case['d'],
                    generator=g).transpose(1, 2)  # strided, as layers do
    grids = (case['query_hw'], case['key_hw'])
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        errors = compare_dp([logits.to(dtype), v.to(dtype)], grids,
                            autocast=None if dtype == torch.float32 else
                            dtype)
        assert max(errors.values()) <= TOLERANCE[dtype], (dtype, errors)
    for uses in (('loss', ), ('out', )):
        errors = compare_dp([logits, v], grids, uses=uses)
        assert max(errors.values()) <= 1e-5, (uses, errors)


@pytest.mark.parametrize('dp', [True, False])
def test_softmax_apply_passes_its_logits_on(dp):
    """The fused softmax (with the DP loss, or with a shift mask) passes
    its logits on for another use (the next LA layer's transform): the
    gradients are the eager composition's with that use's added, which
    the logits kernel adds in its pass (no addition of maps after it)."""
    from vitattn_mm.ops import softmax_apply_passing_on
    g = torch.Generator().manual_seed(0)
    if dp:
        grids, mask = ((6, 10), (3, 5)), None
        logits = torch.randn(2, 2, 60, 15, generator=g) * 2
        v = torch.randn(2, 2, 15, 8, generator=g)
    else:
        grids, mask = None, shifted_window_mask((14, 7), (7, 7), (3, 3),
                                                'cpu')
        logits = torch.randn(4, 2, 49, 49, generator=g) * 2
        v = torch.randn(4, 2, 49, 8, generator=g)
    weight = torch.randn(logits.shape, generator=g)
    upstream = torch.randn(*logits.shape[:3], 8, generator=g)
    fused = [logits.clone().requires_grad_(), v.clone().requires_grad_()]
    out, loss, passed = softmax_apply_passing_on(*fused, mask, grids)
    assert passed.shape == logits.shape and torch.equal(passed, logits)
    assert (loss is None) == (not dp)
    reference = [logits.clone().requires_grad_(), v.clone().requires_grad_()]
    if dp:
        ref_out, ref_loss = softmax_apply_dp_eager(*reference, *grids)
    else:
        ref_out, ref_loss = softmax_apply_eager(*reference, mask), None
    for o, l, x in ((out, loss, passed), (ref_out, ref_loss, reference[0])):
        ((o * upstream).sum() + (x * weight).sum() +
         (3 * l if l is not None else 0)).backward()
    for a, b in zip(fused, reference):
        assert relative_rmse(a.grad, b.grad) <= 1e-5
    if dp:  # the loss unused: the output's and the other use's
        fused[0].grad = None
        out, loss, passed = softmax_apply_passing_on(*fused, mask, grids)
        ((out * upstream).sum() + (passed * weight).sum()).backward()
        expected = torch.autograd.grad(
            (softmax_apply_eager(logits.requires_grad_(), v, None) *
             upstream).sum(), logits)[0] + weight
        assert relative_rmse(fused[0].grad, expected) <= 1e-5


def compare_dp(inputs, grids, autocast=None, uses=('out', 'loss')):
    """``softmax_apply_dp_op`` against ``softmax_apply_dp_eager`` (fp32),
    as :func:`compare`: the relative errors of the output, the loss and
    the gradients of ``uses`` (a random upstream for the output, 3 for
    the loss) by the logits (0) and the values (1)."""
    fused = [t.detach().clone().requires_grad_() for t in inputs]
    reference = [t.detach().float().requires_grad_() for t in inputs]
    with torch.autocast('cpu', dtype=autocast, enabled=autocast is not None):
        out, loss = softmax_apply_dp_op(*fused, *grids)
    ref_out, ref_loss = softmax_apply_dp_eager(*reference, *grids)
    assert loss.dtype == torch.float32 and out.dtype == inputs[1].dtype
    upstream = torch.randn(ref_out.shape,
                           generator=torch.Generator().manual_seed(1))
    upstream = upstream.to(out.dtype)

    def objective(o, l):
        return sum([(o.float() * upstream.float()).sum()] * ('out' in uses)
                   + [3 * l] * ('loss' in uses))

    objective(out, loss).backward()
    objective(ref_out, ref_loss).backward()
    errors = {'out': relative_rmse(out, ref_out),
              'loss': relative_rmse(loss, ref_loss)}
    for i, (a, b) in enumerate(zip(fused, reference)):
        if 'out' in uses or i == 0:
            assert torch.isfinite(a.grad).all(), i
            errors[i] = relative_rmse(a.grad, b.grad)
        else:  # the values have no share in the loss
            assert a.grad is None or not a.grad.any()
    return errors


def test_softmax_apply_fp16_large_logits_stay_finite():
    """Logits of 1e3 (fp16 holds them; their exponentials it does not):
    finite wherever the eager softmax is."""
    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(2, 2, 30, 40, generator=g) * 1e3).half()
    v = (torch.randn(2, 2, 40, 16, generator=g) * 1e3).half()
    with torch.autocast('cpu', dtype=torch.float16):
        fused = softmax_apply_op(logits, v, None)
        eager = softmax_apply_eager(logits, v, None)
    assert torch.isfinite(fused[torch.isfinite(eager)]).all()


@pytest.mark.parametrize('shape, scale', [
    ((2, 3, 49, 49), 2.),  # Swin's 7x7 windows, 3 heads
    ((2, 2, 64, 64), 1.),  # 8x8 windows: a whole tile
    ((4, 1, 5, 5), 3.),
    ((1, 1, 1, 1), 1.),  # one token: no off-diagonal entry
])
def test_diagonality_loss(shape, scale):
    """The bounded Diagonality-Preserving loss of square maps."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(*shape, generator=g) * scale
    errors = compare(diagonality_loss_op, diagonality_loss_eager, [logits],
                     [])
    assert max(errors.values()) <= 1e-5, errors


def test_diagonality_loss_splits_ties_as_amax_does():
    """Equal row maxima share the gradient evenly (``amax``'s backward);
    an excess of exactly 0 passes none (``clamp_min``'s)."""
    logits = torch.zeros(1, 1, 6, 6)
    logits[0, 0, 0, 1] = logits[0, 0, 0, 2] = 3.
    errors = compare(diagonality_loss_op, diagonality_loss_eager, [logits],
                     [])
    assert max(errors.values()) <= 1e-5, errors


def test_diagonality_terms_written_out_gradient_is_autograds():
    """The eager terms' written-out backward (DiagonalityTerms) against
    autograd through the plain ops, fp64: random maps, a uniform map (all
    ties, excess exactly 0), the identity's softmax, ties among the
    off-diagonal and the row maxima (where the excess is 0 and where it is
    positive), the identity (off-diagonal maxima of 0), a 1x1 map (the
    masked copy's only entry, the diagonal, is its maximum)."""
    from vitattn_mm.ops.diagonality_loss import (DiagonalityTerms,
                                                 diagonality_terms_ops)
    g = torch.Generator().manual_seed(0)
    ties = torch.tensor([[0.5, 0.5, 0.], [0.2, 0.2, 0.6], [0.1, 0.45, 0.45]])
    # Off-diagonal maxima tied where the excess is positive (shared), the
    # diagonal 0 there, and a row whose diagonal wins.
    shared = torch.tensor([[0.1, 0.45, 0.45], [0.3, 0.4, 0.3], [0.5, 0.5, 0.]])
    maps = [torch.randn(2, 3, 7, 7, generator=g).softmax(-1),
            torch.full((2, 2, 5, 5), 0.2),
            (3 * torch.eye(6)).softmax(-1)[None], ties[None, None],
            shared[None, None], torch.eye(4)[None, None],
            torch.ones(1, 1, 1, 1)]
    for probs in maps:
        ours = probs.double().requires_grad_()
        ref = probs.double().requires_grad_()
        loss = DiagonalityTerms.apply(ours)[0]
        ref_loss = diagonality_terms_ops(ref)
        assert torch.equal(loss, ref_loss)
        grad, = torch.autograd.grad(1.7 * loss, ours)
        ref_grad, = torch.autograd.grad(1.7 * ref_loss, ref)
        torch.testing.assert_close(grad, ref_grad, rtol=0, atol=1e-15)



@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_diagonality_terms_read_a_half_precision_map_as_it_is(dtype):
    """The terms of a bf16 / fp16 map (a layer's own softmax under
    autocast), its passes in the map's dtype: an fp32 loss within 2e-4
    of the loss of its fp32 copy, a gradient in the map's dtype within
    the tolerance of the fp32 copy's (written out and through the plain
    ops), the same ties (a uniform map's gradient: the copy's rounded)."""
    from vitattn_mm.ops.diagonality_loss import (DiagonalityTerms,
                                                 diagonality_terms_ops)
    g = torch.Generator().manual_seed(0)
    random = (torch.randn(4, 3, 49, 49, generator=g) * 2).softmax(-1)
    uniform = torch.full((2, 2, 5, 5), 0.2, dtype=dtype)
    for probs in (random.to(dtype), uniform):
        copy = probs.float().requires_grad_()
        expected = DiagonalityTerms.apply(copy)[0]
        expected_grad, = torch.autograd.grad(expected, copy)
        for terms in (lambda p: DiagonalityTerms.apply(p)[0],
                      diagonality_terms_ops):
            x = probs.clone().requires_grad_()
            loss = terms(x)
            grad, = torch.autograd.grad(loss, x)
            assert loss.dtype == torch.float32 and grad.dtype == dtype
            assert abs(loss - expected) <= 2e-4 * expected + 1e-7
            assert relative_rmse(grad.float(),
                                 expected_grad) <= TOLERANCE[dtype]
            if probs is uniform:
                assert torch.equal(grad, expected_grad.to(dtype))

@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_diagonality_loss_low_precision(dtype):
    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(2, 3, 49, 49, generator=g) * 2).to(dtype)
    errors = compare(diagonality_loss_op, diagonality_loss_eager, [logits],
                     [], autocast=dtype)
    assert max(errors.values()) <= TOLERANCE[dtype], errors


def test_query_pooling_by_blocks_is_the_adaptive_pooling(monkeypatch):
    """Where the key grid divides the query grid the queries are pooled
    by a mean over blocks in the maps' layout; the adaptive pooling (the
    general route, a captured graph's) gives the same maps and
    gradients."""
    from vitattn_mm.ops import diagonality_loss
    maps = torch.randn(2, 3, 8 * 12, 2 * 3, dtype=torch.float64,
                       requires_grad=True)
    results = []
    for captured in (False, True):
        monkeypatch.setattr(diagonality_loss, 'capturing', lambda: captured)
        pooled = diagonality_loss.pool_queries(maps, (8, 12), (2, 3))
        grad, = torch.autograd.grad(pooled.square().sum(), maps)
        results.append((pooled, grad))
    for got, expected in zip(*results):
        # Sums in another order: a pooled value near 0 can differ in its
        # last bits relative to itself (it failed once at atol=0).
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-15)


def test_query_pooling_by_blocks_keeps_the_maps_dtype():
    """A bf16 map (an LA layer's softmax under autocast) pooled by blocks
    of 3 x 2 queries: the mean of its values in fp32, and the gradient
    the pooled one's broadcast divided by 6, rounded once to bf16."""
    from vitattn_mm.ops.diagonality_loss import pool_queries
    g = torch.Generator().manual_seed(0)
    maps = torch.rand(2, 3, 6 * 6, 2 * 3, generator=g).to(torch.bfloat16)
    maps.requires_grad_()
    pooled = pool_queries(maps, (6, 6), (2, 3))
    expected = maps.detach().double().view(2, 3, 2, 3, 3, 2, 6).mean((3, 5))
    assert pooled.dtype == torch.float32
    torch.testing.assert_close(pooled.double(), expected.view(2, 3, 6, 6),
                               rtol=1e-6, atol=0)
    upstream = torch.randn(pooled.shape, generator=g)
    grad, = torch.autograd.grad(pooled, maps, upstream)
    assert grad.dtype == torch.bfloat16
    broadcast = upstream.double().view(2, 3, 2, 1, 3, 1, 6).expand(
        2, 3, 2, 3, 3, 2, 6) / 6
    torch.testing.assert_close(grad, broadcast.reshape(maps.shape).to(
        torch.bfloat16), rtol=0, atol=0)


@pytest.mark.parametrize('captured', [False, True])
@pytest.mark.parametrize('uses', ['both', 'maps', 'pooled'])
def test_pooling_in_passing_sums_both_uses_gradients(monkeypatch, uses,
                                                     captured):
    """Maps with two uses, as they are and pooled onto the key grid
    (:func:`pool_queries_in_passing`: an LA layer's softmax, applied to
    its values and read by the DP loss): the same values and gradients
    as autograd through the plain ops, with either use alone or both, by
    blocks or (a captured graph's route) adaptively; fp64."""
    from vitattn_mm.ops import diagonality_loss
    monkeypatch.setattr(diagonality_loss, 'capturing', lambda: captured)
    g = torch.Generator().manual_seed(0)
    maps = torch.rand(2, 3, 6 * 6, 2 * 3, generator=g,
                      dtype=torch.float64, requires_grad=True)
    w_maps, w_pooled = (torch.randn(*shape, generator=g, dtype=torch.float64)
                        for shape in ((2, 3, 36, 6), (2, 3, 6, 6)))
    passed, pooled = diagonality_loss.pool_queries_in_passing(
        maps, (6, 6), (2, 3))
    expected = maps.view(2, 3, 2, 3, 3, 2, 6).mean((3, 5)).view(2, 3, 6, 6)
    torch.testing.assert_close(passed, maps, rtol=0, atol=0)
    torch.testing.assert_close(pooled, expected, rtol=1e-12, atol=1e-15)
    terms = {'maps': [(passed, maps, w_maps)],
             'pooled': [(pooled, expected, w_pooled)]}
    terms['both'] = terms['maps'] + terms['pooled']
    got, = torch.autograd.grad(
        sum((t * w).sum() for t, _, w in terms[uses]), maps)
    reference, = torch.autograd.grad(
        sum((t * w).sum() for _, t, w in terms[uses]), maps)
    torch.testing.assert_close(got, reference, rtol=1e-12, atol=1e-15)


def test_pooling_in_passing_rounds_the_sum_once():
    """A bf16 map with both uses: its gradient is the product's gradient
    plus the pooled one's broadcast / 6, summed in fp32 and rounded once
    to bf16."""
    from vitattn_mm.ops import pool_queries_in_passing
    g = torch.Generator().manual_seed(0)
    maps = torch.rand(2, 3, 36, 6, generator=g).to(torch.bfloat16)
    maps.requires_grad_()
    passed, pooled = pool_queries_in_passing(maps, (6, 6), (2, 3))
    upstream = torch.randn(pooled.shape, generator=g)
    upstream_maps = torch.randn(maps.shape, generator=g).to(torch.bfloat16)
    grad, = torch.autograd.grad((passed, pooled), maps,
                                (upstream_maps, upstream))
    assert grad.dtype == torch.bfloat16
    broadcast = upstream.double().view(2, 3, 2, 1, 3, 1, 6).expand(
        2, 3, 2, 3, 3, 2, 6).reshape(maps.shape) / 6
    torch.testing.assert_close(
        grad, (upstream_maps.double() + broadcast).to(torch.bfloat16),
        rtol=0, atol=0)


@pytest.mark.parametrize('query_hw, key_hw', [
    ((4, 6), (2, 3)),    # bins of 2x2 queries, as a reduction ratio gives
    ((5, 7), (3, 4)),    # uneven bins that overlap (ceil / floor edges)
    ((3, 5), (3, 2)),    # one side not reduced
    ((1, 6), (1, 1)),    # one key: every query in its bin
    ((3, 4), (3, 4)),    # square: bins of one query (LaViT's last stage)
])
def test_pooled_diagonality_loss(query_hw, key_hw):
    """The loss of maps pooled onto the key grid (LaViT's, keys spatially
    reduced), against the softmax + adaptive pooling + terms eagerly."""
    g = torch.Generator().manual_seed(0)
    Nq, Nk = query_hw[0] * query_hw[1], key_hw[0] * key_hw[1]
    logits = torch.randn(1, 2, Nq, Nk, generator=g) * 2
    errors = compare(pooled_diagonality_loss_op,
                     pooled_diagonality_loss_eager, [logits],
                     [list(query_hw), list(key_hw)])
    assert max(errors.values()) <= 1e-5, errors


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_pooled_diagonality_loss_low_precision(dtype):
    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(1, 2, 35, 12, generator=g) * 2).to(dtype)
    errors = compare(pooled_diagonality_loss_op,
                     pooled_diagonality_loss_eager, [logits],
                     [[5, 7], [3, 4]], autocast=dtype)
    assert max(errors.values()) <= TOLERANCE[dtype], errors


def test_ops_run_their_eager_composition_without_kernels(monkeypatch):
    """On the CPU without the interpreter the ops run the eager
    composition, forward and backward (a backward op cannot record
    autograd inside itself: it differentiates with torch.func)."""
    monkeypatch.setenv('TRITON_INTERPRET', '0')
    assert not kernels_run_on(torch.device('cpu'))
    mask = shifted_window_mask((14, 7), (7, 7), (3, 3), 'cpu')
    g = torch.Generator().manual_seed(0)
    cases = [
        (focused_linear_attention_op, focused_linear_attention_eager,
         *focused_inputs(kv_tokens=6)),
        (relu_linear_attention_op, relu_linear_attention_eager,
         relu_inputs(), [3, 100.]),
        (mean_shift_attention_op, mean_shift_attention_eager,
         mean_shift_inputs(), [mask, 2, 32**-0.5, True]),
        (score_conv_op, score_conv_eager,
         [torch.randn(2, 2, 12, 6, generator=g),
          torch.randn(2, 1, 3, 3, generator=g),
          torch.randn(2, 1, 3, 3, generator=g)], [[3, 4], [2, 3]]),
        (with_head_mix(score_conv_op), with_head_mix(score_conv_eager),
         [torch.randn(2, 2, 12, 6, generator=g),
          torch.randn(2, 1, 3, 3, generator=g),
          torch.randn(2, 1, 3, 3, generator=g),
          torch.randn(2, 2, 1, 1, generator=g)], [[3, 4], [2, 3]]),
        (softmax_apply_op, softmax_apply_eager,
         [torch.randn(4, 2, 49, 49, generator=g),
          torch.randn(4, 2, 49, 8, generator=g)], [mask]),
        (diagonality_loss_op, diagonality_loss_eager,
         [torch.randn(2, 2, 49, 49, generator=g)], []),
        (pooled_diagonality_loss_op, pooled_diagonality_loss_eager,
         [torch.randn(2, 2, 70, 12, generator=g)], [[7, 10], [3, 4]]),
    ]
    for op, eager, inputs, constants in cases:
        errors = compare(op, eager, inputs, constants)
        assert max(errors.values()) <= 1e-6, (op, errors)
    errors = compare_dp([torch.randn(2, 2, 24, 6, generator=g),
                         torch.randn(2, 2, 6, 8, generator=g)],
                        ((4, 6), (2, 3)))
    assert max(errors.values()) <= 1e-6, errors
    # bf16 activations with fp32 weights, as under autocast (which does
    # not reach inside the op): the composition casts the conv weights.
    inputs, constants = focused_inputs(kv_tokens=6, dtype=torch.bfloat16)
    leaves = [t.requires_grad_() if t is not None else t for t in inputs]
    out = focused_linear_attention_op(*leaves, *constants)
    out.float().pow(2).mean().backward()
    reference = focused_linear_attention_eager(
        *[t.detach().float() if t is not None else t for t in inputs],
        *constants)
    assert out.dtype == torch.bfloat16
    assert relative_rmse(out.float(), reference) <= 5e-3
    assert all(t.grad is not None for t in leaves if t is not None)


def test_ops_pass_torch_library_opcheck():
    """Schema, fake (meta) implementation and autograd registration as
    torch.library checks them, on the kernels' inputs."""
    inputs, constants = focused_inputs(hw=(2, 3), C=32, kv_tokens=4)
    torch.library.opcheck(focused_linear_attention_with_sums,
                          (*inputs, *constants),
                          test_utils=('test_schema', 'test_faketensor',
                                      'test_autograd_registration'))
    mask = shifted_window_mask((14, 7), (7, 7), (3, 3), 'cpu')
    torch.library.opcheck(mean_shift_attention_with_lse,
                          (*mean_shift_inputs(C=32), mask, 2, 0.25, True),
                          test_utils=('test_schema', 'test_faketensor',
                                      'test_autograd_registration'))
    for head_mix in ((), (torch.randn(2, 2, 1, 1), )):
        torch.library.opcheck(score_conv_op,
                              (torch.randn(2, 2, 6, 4),
                               torch.randn(2, 1, 3, 3),
                               torch.randn(2, 1, 3, 3), [2, 3], [2, 2],
                               *head_mix),
                              test_utils=('test_schema', 'test_faketensor',
                                          'test_autograd_registration'))
    torch.library.opcheck(diagonality_loss_op, (torch.randn(2, 2, 7, 7), ),
                          test_utils=('test_schema', 'test_faketensor',
                                      'test_autograd_registration'))
    torch.library.opcheck(softmax_apply_with_lse,
                          (torch.randn(4, 2, 49, 49),
                           torch.randn(4, 2, 49, 8), mask),
                          test_utils=('test_schema', 'test_faketensor',
                                      'test_autograd_registration'))
    torch.library.opcheck(softmax_apply_with_dp_loss,
                          (torch.randn(2, 2, 24, 6),
                           torch.randn(2, 2, 6, 8), [4, 6], [2, 3]),
                          test_utils=('test_schema', 'test_faketensor',
                                      'test_autograd_registration'))
    torch.library.opcheck(relu_linear_attention_with_sums,
                          (*relu_inputs(N=5, C=32, heads=2), 2, 1.),
                          test_utils=('test_schema', 'test_faketensor',
                                      'test_autograd_registration'))


@pytest.fixture
def whole_map_tiles():
    """The kernels' launch tiles raised to 128 tokens a side, about a tiny
    backbone's whole map: the interpreter runs each program in turn, at
    some milliseconds an op whatever the tile, so a step of a tiny
    backbone in the default tiles (score conv 16 x 64, linear attention
    32) takes minutes of programs that the kernel tests already check."""
    from vitattn_mm.ops.backend import launch_settings
    with launch_settings('triton_linear_attention', BLOCK_N=128), \
            launch_settings('triton_score_conv', BLOCK_Q=128, BLOCK_K=128), \
            launch_settings('triton_softmax_apply', BLOCK=128), \
            launch_settings('triton_mean_shift_attention', BLOCK=128):
        yield


@pytest.mark.parametrize('name', [
    'FLattenSwinTransformer',
    pytest.param('FLattenPVT', marks=pytest.mark.slow),
    pytest.param('FLattenPVTv2', marks=pytest.mark.slow),
    pytest.param('FLattenCSwinTransformer', marks=pytest.mark.slow),
    pytest.param('FLattenDeiT', marks=pytest.mark.slow), 'L2ViT',
    'MSFSwinTransformer', pytest.param('MSFViT', marks=pytest.mark.slow),
    pytest.param('LaViT', marks=pytest.mark.slow),
    pytest.param('LessAttnSwinTransformer', marks=pytest.mark.slow)
])
def test_backbones_train_the_same_with_either_backend(name,
                                                    whole_map_tiles):
    """A training step of a tiny backbone with the fused ops (their
    kernels, interpreted) gives the eager step's outputs and gradients
    (shifted windows and Swin's mask included):
    same weights, same keys, an input of odd size. (The wiring, in tiles
    as large as the tiny maps: the tests above take each kernel across
    its default tiles' edges.)"""
    from tiny_backbones import build_tiny
    eager = build_tiny(name, attn_backend='eager').train()
    fused = build_tiny(name, attn_backend='triton').train()
    assert fused.state_dict().keys() == eager.state_dict().keys()
    fused.load_state_dict(eager.state_dict())
    image = torch.randn(2, 3, 37, 45)
    outs = {}
    for label, model in (('eager', eager), ('fused', fused)):
        torch.manual_seed(0)  # the same drop-path draws
        out = model(image)
        aux = model.pop_aux_losses().values()  # Less-Attention's loss_dp
        (sum(o.pow(2).mean() for o in out) + sum(aux)).backward()
        outs[label] = out
    for a, b in zip(outs['fused'], outs['eager']):
        assert relative_rmse(a, b) <= 1e-5
    grads = [(key, a.grad, b.grad) for (key, a), b in zip(
        fused.named_parameters(), eager.parameters()) if b.grad is not None]
    every = torch.cat([g.flatten() for _, _, g in grads])
    # Per tensor, against the whole gradient's scale: some are ~0 in
    # theory (a bias before a norm) and only rounding differs there.
    scale = every.double().pow(2).mean().sqrt()
    for key, a, b in grads:
        error = (a.double() - b.double()).pow(2).mean().sqrt()
        assert error <= 1e-4 * max(scale, b.double().pow(2).mean().sqrt()), \
            key


def test_onnx_export_takes_the_eager_path(tmp_path):
    """A model built for the fused ops exports (ONNX knows aten ops, not
    ``torch.ops.vitattn``) and keeps its backend after the export."""
    from tiny_backbones import build_tiny
    from vitattn_mm.deployment.onnx_export import export_onnx
    model = build_tiny('FLattenPVT', attn_backend='triton')
    export_onnx(model, str(tmp_path / 'model.onnx'), (64, 64))
    import onnx
    graph = onnx.load(str(tmp_path / 'model.onnx')).graph
    assert not [n.op_type for n in graph.node if 'vitattn' in n.domain]
    assert {m.attn_backend for m in model.modules()
            if hasattr(m, 'attn_backend')} == {'triton'}


@pytest.mark.slow
def test_fused_ops_compile_in_one_graph():
    """``torch.compile`` traces the fused ops through their shape functions
    (no graph break; forward and backward), and the compiled step gives
    the eager one's output and gradients."""
    from vitattn_mm.models.attentions import (FocusedLinearAttention,
                                              MeanShiftAttention)
    torch.manual_seed(0)
    for attn, hw in ((FocusedLinearAttention(32, 2, grid_size=(4, 6),
                                             sr_ratio=2,
                                             attn_backend='triton'), (4, 6)),
                     (MeanShiftAttention(32, 2, window_size=(4, 4),
                                         attn_backend='triton'), (4, 4))):
        x = torch.randn(2, hw[0] * hw[1], 32, requires_grad=True)
        compiled = torch.compile(lambda t: attn(t, hw)[0], fullgraph=True,
                                 backend='aot_eager')
        out = compiled(x)
        out.sum().backward()
        grad, x.grad = x.grad, None
        attn.attn_backend = 'eager'
        ref = attn(x, hw)[0]
        ref.sum().backward()
        assert relative_rmse(out, ref) <= 1e-5
        assert relative_rmse(grad, x.grad) <= 1e-5
    # An LA map's ops: the softmax with the DP loss passing its logits on
    # (an autograd.Function around the op) to the next layer's score
    # convs with the head mix.
    from vitattn_mm.ops import softmax_apply_passing_on
    leaves = [torch.randn(2, 2, 24, 6), torch.randn(2, 2, 6, 8),
              torch.randn(2, 1, 3, 3), torch.randn(2, 2, 1, 1)]
    leaves = [t.requires_grad_() for t in leaves]

    def la_step(logits, v, taps, mix):
        out, loss, passed = softmax_apply_passing_on(logits, v, None,
                                                     ((4, 6), (2, 3)))
        after = score_conv_op(passed, taps, taps, [4, 6], [2, 3], mix)
        return out.sum() + loss + after.square().sum()

    compiled = torch.compile(la_step, fullgraph=True, backend='aot_eager')
    got = torch.autograd.grad(compiled(*leaves), leaves)
    expected = torch.autograd.grad(la_step(*leaves), leaves)
    for a, b in zip(got, expected):
        assert relative_rmse(a, b) <= 1e-6


def test_auto_backend_is_eager_until_a_gpu_measures_fused_faster(
        monkeypatch):
    """'auto' is eager on every device while the fused steps measured on a
    GPU are slower (AUTO_FUSES_ON_CUDA False). Switched on, it fuses on CUDA
    when Triton imports, except a flash-style op's fp32 dots (no tensor
    cores: measured slower than SDPA on an H200). 'triton' and 'eager' are
    what they say, on any device and dtype."""
    from vitattn_mm.ops import backend, uses_fused_op
    cuda, cpu = torch.device('cuda'), torch.device('cpu')
    assert backend.AUTO_FUSES_ON_CUDA is False
    for dtype in (None, torch.bfloat16, torch.float16, torch.float32):
        assert not uses_fused_op('auto', cuda, dtype)
    monkeypatch.setattr(backend, 'AUTO_FUSES_ON_CUDA', True)
    has_triton = backend.triton_importable() is None
    assert uses_fused_op('auto', cuda) is has_triton
    assert uses_fused_op('auto', cuda, torch.bfloat16) is has_triton
    assert uses_fused_op('auto', cuda, torch.float16) is has_triton
    assert not uses_fused_op('auto', cuda, torch.float32)
    assert not uses_fused_op('auto', cpu, torch.bfloat16)
    assert uses_fused_op('triton', cuda, torch.float32)
    assert uses_fused_op('triton', cpu)
    assert not uses_fused_op('eager', cuda, torch.bfloat16)


def compile_kernels(*args, interpret=False, timeout=900):
    """``tools/compile_kernels.py *args`` in a process of its own, without
    the interpreter (which replaces the compiler) unless ``interpret``."""
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != 'TRITON_INTERPRET'}
    if interpret:
        env['TRITON_INTERPRET'] = '1'
    return subprocess.run(
        [sys.executable, 'tools/compile_kernels.py', *args], cwd=ROOT,
        env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_every_kernel_compiles_for_hopper():
    """The interpreter runs a kernel's Python, not Triton's compiler: the
    first GPU run met a kernel that passed every interpreted test and did
    not compile (a loop-carried variable changing type). Each kernel the
    families launch compiles for sm_90 (front end, passes, ptxas) in fp32
    and bf16, in a process without the interpreter, and fits its shared
    memory (tools/compile_kernels.py; fp16 takes bf16's code)."""
    families = ['FLattenPVT', 'FLattenSwinTransformer', 'L2ViT',
                'MSFSwinTransformer', 'LessAttnSwinTransformer', 'LaViT']
    args = ['--precision', 'fp32', '--precision', 'bf16']
    for family in families:
        args += ['--family', family]
    done = compile_kernels(*args)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    kernels = {line.split('|')[1].strip() for line in
               done.stdout.splitlines() if line.startswith('| triton_')}
    # Every kernel of the ops' kernel modules (their helpers are not
    # launched): the families above launch them all.
    import glob
    import importlib
    expected = set()
    for path in glob.glob(os.path.join(ROOT, 'vitattn_mm', 'ops',
                                       'triton_*.py')):
        name = os.path.splitext(os.path.basename(path))[0]
        module = importlib.import_module(f'vitattn_mm.ops.{name}')
        expected |= {f'{name}.{attr}' for attr in vars(module)
                     if attr.endswith('_kernel')}
    assert kernels == expected, sorted(expected ^ kernels)
    # Spills (the stack frame: local memory) at the default launch
    # settings of a bf16 step: none, but in the linear attention's query
    # backward of a 64-wide head (FLatten-PVT), some tens of bytes a
    # thread (its backward kernels spilled 3-7 KB before 0.5.12; the
    # flash-style kernels and the square maps' DP loss 16-264 B).
    for line in done.stdout.splitlines():
        if not line.startswith('| triton_'):
            continue
        kernel, specialization, stack, used_by = (
            line.split('|')[i].strip() for i in (1, 2, 6, 9))
        if 'bf16' not in used_by:
            continue
        wide = kernel.startswith('triton_linear_attention.') and \
            'BLOCK_D=64,' in specialization
        assert int(stack) <= (128 if wide else 0), line


@pytest.mark.slow
def test_linear_attention_tuning_candidates_compile_for_hopper():
    """The GPU suite's tuning tries the linear attention's products on
    tensor cores ('tf32x3') with 8 warps: they compile for sm_90 too,
    focused (FLatten) and not (L2ViT), so a GPU session spends no time
    on a setting that cannot run."""
    done = compile_kernels(
        '--precision', 'bf16', '--family', 'FLattenPVT', '--family', 'L2ViT',
        '--set', 'triton_linear_attention.DOT_PRECISION=tf32x3', '--set',
        'triton_linear_attention.NUM_WARPS=8', timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines()
            if line.startswith('| triton_linear_attention.')]
    assert len(rows) == 8 and all('num_warps=8' in r for r in rows)


def test_compile_kernels_refuses_bad_input_by_name():
    """An unknown family lists the valid ones; under the interpreter (which
    replaces the compiler) the tool says to unset it."""
    done = compile_kernels('--family', 'Swin', timeout=300)
    assert done.returncode == 1
    assert "unknown family ['Swin']" in done.stderr
    assert 'FLattenSwinTransformer' in done.stderr
    done = compile_kernels(interpret=True, timeout=300)
    assert done.returncode == 1 and 'unset TRITON_INTERPRET' in done.stderr


def test_compile_kernels_sets_launch_settings_by_name(monkeypatch, capsys):
    """``--set MODULE.NAME=VALUE`` sets a kernel module's launch setting
    (a literal, else the text); a setting the module lacks, or no such
    module, is refused by name (exit status 2)."""
    import argparse
    import importlib.util
    from vitattn_mm.ops import triton_linear_attention as tk
    spec = importlib.util.spec_from_file_location(
        'compile_kernels', os.path.join(ROOT, 'tools', 'compile_kernels.py'))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    parser = argparse.ArgumentParser(prog='compile_kernels.py')
    monkeypatch.setattr(tk, 'NUM_WARPS', tk.NUM_WARPS)
    monkeypatch.setattr(tk, 'DOT_PRECISION', tk.DOT_PRECISION)
    tool._apply_setting(parser, 'triton_linear_attention.NUM_WARPS=8')
    tool._apply_setting(parser,
                        'triton_linear_attention.DOT_PRECISION=tf32x3')
    assert (tk.NUM_WARPS, tk.DOT_PRECISION) == (8, 'tf32x3')
    for setting, message in (
            ('triton_linear_attention.NUMWARPS=8', 'launch setting of'),
            ('triton_nothing.NUM_WARPS=8', 'no kernel module')):
        with pytest.raises(SystemExit) as exit_:
            tool._apply_setting(parser, setting)
        assert exit_.value.code == 2
        assert message in capsys.readouterr().err, setting


def test_compile_kernels_counts_the_warps_an_sm_holds():
    """Occupancy from a compiled kernel's registers and shared memory
    (a Hopper SM: 65536 registers, 228 KiB, 64 warps): 255 registers on
    8 warps fill the register file with one block; 128 on 4 allow four;
    shared memory or the warp limit can bind first."""
    from vitattn_tools.kernel_compile import resident_warps
    assert resident_warps(255, 0, 8) == 8
    assert resident_warps(128, 0, 4) == 16
    assert resident_warps(128, 100_000, 4) == 8  # two blocks' shared
    assert resident_warps(32, 0, 8) == 64  # the warp limit
    assert resident_warps(40, 0, 1) == 32  # the block limit
    # Each specialization counts its launches' programs, fewest to most.
    from vitattn_tools.kernel_compile import Compiled, KernelCompiler
    compiler = KernelCompiler()
    result = Compiled('k', 'sig')
    compiler._compile = lambda fn, args, kwargs: result
    for grid in ((4, 40), (2, 10, 3), (300, )):
        compiler.compile(None, (), {}, grid)
    assert result.programs == (60, 300)


@pytest.mark.parametrize('keys', [20, 63])
def test_focusing_routes_agree(keys):
    """Queries and keys focused apart (the CPU's route) and in one call
    in the heads' layout (a GPU's): the same head-major features and
    gradients, spatially reduced keys or not, the queries (and, joined,
    queries and keys) in a layout the batched products read as it is."""
    from vitattn_mm.ops import focusing
    torch.manual_seed(0)
    q = torch.randn(2, 63, 16, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, keys, 16, dtype=torch.float64, requires_grad=True)
    s = torch.rand(16, dtype=torch.float64, requires_grad=True) + 0.5
    apart = focusing.focused_pair(q, k, s, 3., 4)
    joined = focusing.focused_joint(q, k, s, 3., 4)
    assert joined.shape == (2, 4, 63 + keys, 4)
    # Batches of matrices as they are in memory: no product copies.
    assert apart[0].flatten(0, 1)._base is not None
    assert joined.flatten(0, 1)._base is not None
    results = []
    for fq, fk in (apart, joined.split([63, keys], dim=-2)):
        loss = (fq.square().sum() + fk.sum(-1).square().sum())
        results.append((fq, fk, *torch.autograd.grad(loss, (q, k, s))))
    for got, expected in zip(*results):
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=0)


@pytest.mark.parametrize('l2vit', [False, True])
@pytest.mark.parametrize('values_dtype', [torch.float64, torch.float32,
                                          torch.bfloat16])
@pytest.mark.parametrize('queries, keys', [(30, 30), (63, 20)])
def test_joined_linear_attention_gradient_is_autograds(values_dtype, queries,
                                                       keys, l2vit):
    """JoinedLinearAttention (queries and keys joined, its gradient
    written out into one tensor per product) against autograd through
    the plain products: the values' column of ones (fp64, bf16) and the
    keys' sum (fp32 values), as many keys as queries or fewer; FLatten's
    normaliser and L2ViT's (a per-head temperature, a floor that about
    half of the tokens' normalisers are under, one temperature 0)."""
    from vitattn_mm.ops.linear_products import (JoinedLinearAttention,
                                                 normalised_linear_attention)
    torch.manual_seed(0)
    dtype = torch.float64 if values_dtype == torch.float64 else \
        torch.float32
    # Not contiguous: the gradient is written into a tensor of its own.
    features = torch.rand(2, queries + keys, 3, 8, dtype=dtype).transpose(
        1, 2).requires_grad_()
    v = torch.randn(2, keys, 24, dtype=values_dtype).unflatten(
        -1, (3, 8)).transpose(1, 2).detach().requires_grad_()
    g = torch.randn(2, 3, queries, 8, dtype=dtype)
    q, k = features.split([queries, keys], dim=-2)
    inputs = [features, v]
    if l2vit:
        temperature = torch.tensor([[[0.5]], [[0.]], [[2.]]], dtype=dtype,
                                   requires_grad=True)
        inputs.append(temperature)
        floor = (q @ k.sum(-2, keepdim=True).transpose(-2, -1)).median()
        out = JoinedLinearAttention.apply(features, v, queries, 0.,
                                          temperature, floor.item())[0]
        reference = normalised_linear_attention(q, k, v, 0., temperature,
                                                floor.item())
    else:
        out = JoinedLinearAttention.apply(features, v, queries, 1e-4)[0]
        reference = normalised_linear_attention(q, k, v, 1e-4)
    got = torch.autograd.grad(out, inputs, g)
    want = torch.autograd.grad(reference, inputs, g)
    tol = dict(rtol=1e-12, atol=1e-14) if dtype == torch.float64 else \
        dict(rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out, reference, **tol)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype
        if a.dtype == torch.bfloat16:  # both rounded once: an ulp apart
            torch.testing.assert_close(a, b)
        else:
            torch.testing.assert_close(a, b, **tol)


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_relu_linear_attention_gradient_is_autograds(monkeypatch, dtype):
    """L2ViT's eager attention (ReluLinearAttention: the ReLU, the joined
    cast and the products with their gradient written out into the
    projection's) against autograd through the plain ops a captured graph
    runs: output and the gradients of qkv and the temperature, an odd
    token count, three heads, a floor about half of the normalisers are
    under, one temperature 0, negative inputs (the ReLU's zeros)."""
    from vitattn_mm.ops import linear_products
    torch.manual_seed(0)
    qkv = torch.randn(2, 37, 3 * 24).to(dtype)
    temperature = torch.tensor([[[0.5]], [[0.]], [[2.]]])
    g = torch.randn(2, 37, 24).to(dtype)
    results = []
    for captured in (False, True):
        monkeypatch.setattr(linear_products, 'capturing', lambda: captured)
        inputs = [qkv.clone().requires_grad_(),
                  temperature.clone().requires_grad_()]
        out = relu_linear_attention_eager(*inputs, 3, 40.)
        results.append((out, *torch.autograd.grad(out, inputs, g)))
    for got, expected in zip(*results):
        assert got.dtype == expected.dtype
        error = (got.float() - expected.float()).norm() / \
            expected.float().norm()
        assert error <= (1e-6 if dtype == torch.float32 else 1e-3), error


@pytest.mark.parametrize('heads', [3, 9])
def test_score_conv_routes_agree(monkeypatch, heads):
    """The eager score convs head by head (the CPU's route) and every
    head at once (a GPU's), each alone and with the 1x1 head mix after
    them (which the latter folds into its query conv up to
    FOLDED_MIX_MAX_HEADS heads): the same maps and gradients."""
    from vitattn_mm.ops import score_conv
    assert 3 <= score_conv.FOLDED_MIX_MAX_HEADS < 9  # both ways below
    torch.manual_seed(0)
    logits = torch.randn(2, heads, 35, 12, dtype=torch.float64,
                         requires_grad=True)
    weights = [torch.randn(heads, 1, 3, 3, dtype=torch.float64,
                           requires_grad=True) for _ in range(2)]
    mix = torch.randn(heads, heads, 1, 1, dtype=torch.float64,
                      requires_grad=True)
    for head_mix in (None, mix):
        results = []
        for per_head in (True, False):
            monkeypatch.setattr(score_conv, 'one_head_at_a_time',
                                lambda _: per_head)
            out = score_conv_eager(logits, *weights, (5, 7), (3, 4),
                                   head_mix=head_mix)
            inputs = [logits, *weights] + ([] if head_mix is None else
                                           [head_mix])
            grads = torch.autograd.grad(out.square().sum(), inputs)
            results.append((out, *grads))
        for got, expected in zip(*results):
            torch.testing.assert_close(got, expected)
