"""benchmarks/cost_model.py: what it counts is what its docs say it counts
(docs/benchmarks.md#projected-gpu-training-step-the-cost-model)."""
import importlib.util
import json
import math
import os.path as osp

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
_spec = importlib.util.spec_from_file_location(
    'cost_model', osp.join(ROOT, 'benchmarks', 'cost_model.py'))
cm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cm)


def record(fn, *shapes, dtype=None, grad=True):
    """The ops of ``fn(*tensors)`` and its backward, on the meta device."""
    tensors = [torch.empty(*s, device='meta', requires_grad=grad)
               for s in shapes]
    recorder = cm.StepRecorder()
    autocast = torch.autocast('cpu', dtype=dtype, enabled=dtype is not None)
    with recorder, cm.MetaAutocast():
        with autocast:
            out = fn(*tensors)
        recorder.phase = 'backward'
        out.float().sum().backward()
    return recorder.ops


def record_bf16(fn, *shapes):
    """The ops of ``fn(*tensors)`` on bf16 tensors under bf16 autocast,
    and of the backward of its output's sum, on the meta device."""
    tensors = [torch.empty(*s, device='meta', dtype=torch.bfloat16,
                           requires_grad=True) for s in shapes]
    recorder = cm.StepRecorder()
    with recorder, cm.MetaAutocast():
        with torch.autocast('cpu', dtype=torch.bfloat16):
            out = fn(*tensors)
        recorder.phase = 'backward'
        out.sum().backward()
    return recorder.ops


def names(ops, phase=None):
    return [r.name for r in ops if phase in (None, r.phase)]


def test_sdpa_is_one_kernel_each_way():
    q = (2, 3, 100, 32)
    ops = record(F.scaled_dot_product_attention, q, q, q)
    assert names(ops, 'forward') == ['vitattn_cost::fused_attention']
    assert 'vitattn_cost::fused_attention_backward' in names(ops, 'backward')
    assert 'aten::bmm' not in names(ops)
    forward = ops[0]
    # torch's formula: two products of 2 * B * h * N * N * d
    assert forward.flops == 2 * 2 * 2 * 3 * 100 * 100 * 32
    # q, k, v and the output (+ fp32 log-sum-exp) at 4 bytes
    assert forward.nbytes == 4 * (4 * 2 * 3 * 100 * 32) + 4 * 2 * 3 * 100


def test_sdpa_on_5d_takes_the_math_path():
    q = (2, 4, 3, 49, 32)  # (B, windows, heads, N, d): no fused kernel
    ops = record(F.scaled_dot_product_attention, q, q, q)
    assert 'vitattn_cost::fused_attention' not in names(ops)
    assert 'aten::bmm' in names(ops)


@pytest.mark.parametrize('keys, pads', [(49, True), (64, False)])
def test_an_unaligned_float_mask_is_padded_first(keys, pads):
    def attend(q, k, bias):
        return F.scaled_dot_product_attention(q, k, k, attn_mask=bias)
    ops = record(attend, (2, 3, 49, 32), (2, 3, keys, 32), (3, 49, keys))
    assert ('aten::constant_pad_nd' in names(ops, 'forward')) is pads


def test_a_fill_only_writes():
    """``x.new_ones(...)`` and ``zeros_like(x)`` read nothing of ``x``."""
    x = torch.empty(4, 1000, device='meta')
    with cm.StepRecorder() as recorder:
        x.new_ones(1, 1)
        torch.zeros_like(x)
        x + 1
    assert [r.nbytes for r in recorder.ops] == [4, 16000, 32000]


def test_a_dtype_promotion_is_no_kernel():
    """``torch.promote_types`` passes the dispatcher (a mode sees it) but
    computes a dtype from dtypes: nothing runs on a GPU."""
    x = torch.empty(4, 1000, device='meta', dtype=torch.bfloat16)
    with cm.StepRecorder() as recorder:
        x.to(torch.promote_types(x.dtype, torch.float32))
    assert names(recorder.ops) == ['aten::_to_copy']

def test_an_out_argument_is_only_written():
    """``torch.div(a, b, out=c)`` reads a and b and writes c, as
    ``c.copy_(a)`` reads a and writes c; an in-place op reads and writes
    its tensor."""
    x = torch.empty(4, 1000, device='meta')
    half = torch.empty(4, 1000, device='meta', dtype=torch.bfloat16)
    with cm.StepRecorder() as recorder:
        torch.div(x, x, out=half)
        half.copy_(x)
        x.mul_(2)
    assert [r.nbytes for r in recorder.ops] == [40000, 24000, 32000]


def test_depthwise_conv_weight_gradient_costs_its_forward():
    """torch's counter takes a grouped conv's weight gradient as dense."""
    conv = nn.Conv2d(96, 96, 7, padding=3, groups=96, device='meta')
    ops = record(conv, (2, 96, 56, 56))
    forward, = [r for r in ops if r.name == 'aten::convolution']
    backward, = [r for r in ops if r.name == 'aten::convolution_backward']
    assert forward.flops == 2 * 2 * 56 * 56 * 96 * 49
    assert backward.flops == 2 * forward.flops  # input and weight grads


def test_autocast_is_emulated_on_meta_tensors():
    linear = nn.Linear(32, 32, device='meta')
    norm = nn.LayerNorm(32, device='meta')
    seen = {}

    def step(x):
        y = linear(x)
        normed = norm(y)
        seen.update(linear=y.dtype, norm=normed.dtype)
        return linear(normed)  # the weight's cast is cached: cast once

    ops = record(step, (4, 10, 32), dtype=torch.bfloat16)
    assert seen == dict(linear=torch.bfloat16, norm=torch.float32)
    casts = [r for r in ops if r.name == 'aten::_to_copy' and
             r.phase == 'forward']
    # x, the weight, the bias once each; the norm's input and output.
    assert len(casts) == 5


def test_full_precision_regions_stay_fp32():
    from vitattn_mm.models.layers.common import full_precision

    def step(x, w):
        with full_precision(x):
            return x @ w

    ops = record(step, (8, 16), (16, 16), dtype=torch.bfloat16)
    assert 'aten::_to_copy' not in names(ops, 'forward')


def test_custom_ops_are_one_kernel_each_way():
    from vitattn_mm.models.attentions import FocusedLinearAttention
    with torch.device('meta'):
        attn = FocusedLinearAttention(64, 2, grid_size=(8, 8),
                                      attn_backend='triton')
    ops = record(lambda x: attn(x, (8, 8))[0], (2, 64, 64))
    assert names(ops).count('vitattn::focused_linear_attention') == 1
    assert names(ops).count('vitattn::focused_linear_attention_backward') \
        == 1
    fused, = [r for r in ops if r.name == 'vitattn::focused_linear_attention']
    assert fused.flops > 0 and fused.nbytes > 0


def test_launches_record_a_fused_ops_kernels_as_a_gpu_runs_them():
    """With ``launches`` a custom op runs its CUDA implementation on the
    meta tensors, each Triton launch recorded as a kernel that moves its
    tensor arguments once (``<op>/<kernel>``, the op's FLOPs on the
    first) and its aten ops as they come; the kernels are restored after.
    ``softmax_apply``: one forward launch; a backward of two launches
    (none of the forward kernel), the logits' reading the logits, the
    values, the upstream gradient, the forward's output and log-sum-exp
    and writing the logits' gradient."""
    from vitattn_mm.ops import softmax_apply_op, triton_softmax_apply
    kernel = triton_softmax_apply.logits_backward_kernel
    B, h, Nq, Nk, d = 2, 3, 70, 20, 16
    logits = torch.empty(B, h, Nq, Nk, device='meta', requires_grad=True)
    v = torch.empty(B, h, Nk, d, device='meta', requires_grad=True)
    recorder = cm.StepRecorder(launches=True)
    with recorder:
        out = softmax_apply_op(logits, v, None)
        recorder.phase = 'backward'
        out.backward(torch.empty_like(out))
    launched = [(r.name, r.phase) for r in recorder.ops if '/' in r.name]
    assert launched == [
        ('vitattn::softmax_apply/forward_kernel', 'forward'),
        ('vitattn::softmax_apply_backward/logits_backward_kernel',
         'backward'),
        ('vitattn::softmax_apply_backward/values_backward_kernel',
         'backward')]
    by_name = {r.name: r for r in recorder.ops}
    maps, rows = B * h * Nq * Nk * 4, B * h * Nq * d * 4
    lse = B * h * Nq * 4
    logits_grad = by_name[launched[1][0]]
    assert logits_grad.nbytes == 2 * maps + v.numel() * 4 + 2 * rows + lse
    assert logits_grad.flops == 2 * 2 * B * h * Nq * Nk * d
    assert by_name[launched[2][0]].flops == 0  # the op's on its first
    assert triton_softmax_apply.logits_backward_kernel is kernel
    # Without launches: the op once each way, inputs and outputs once.
    ops = record(lambda x, y: softmax_apply_op(x, y, None), logits.shape,
                 v.shape)
    assert [r.name for r in ops if r.name.startswith('vitattn::')] == [
        'vitattn::softmax_apply', 'vitattn::softmax_apply_backward']


def test_la_maps_gradients_are_added_in_the_softmax_pass():
    """An LA layer's map with two uses, its fused softmax (with the DP
    loss) and the next layer's transform, as launched on a GPU: the
    transform's gradient of the map is added by the softmax's logits
    kernel, which reads it (one map more than without the second use),
    and no aten op adds two maps (three passes)."""
    from vitattn_mm.ops import score_conv_op, softmax_apply_passing_on
    B, h, query_hw, key_hw, d = 2, 2, (8, 12), (4, 6), 16
    shape = (B, h, 96, 24)

    def backward(second_use):
        logits = torch.empty(shape, device='meta', requires_grad=True)
        v = torch.empty(B, h, 24, d, device='meta', requires_grad=True)
        taps = torch.empty(h, 1, 3, 3, device='meta', requires_grad=True)
        recorder = cm.StepRecorder(launches=True)
        with recorder:
            out, loss, passed = softmax_apply_passing_on(
                logits, v, None, (query_hw, key_hw))
            total = out.sum() + loss
            if second_use:
                total = total + score_conv_op(passed, taps, taps,
                                              list(query_hw),
                                              list(key_hw)).sum()
            recorder.phase = 'backward'
            total.backward()
        return [r for r in recorder.ops if r.phase == 'backward']

    def logits_kernel(ops):
        kernel, = [r for r in ops
                   if r.name.endswith('/logits_backward_kernel')]
        return kernel.nbytes

    alone, both = backward(False), backward(True)
    map_bytes = 4 * B * h * 96 * 24
    assert logits_kernel(both) == logits_kernel(alone) + map_bytes
    assert not [r for r in both if r.name == 'aten::add.Tensor'
                and r.nbytes >= 3 * map_bytes]


def test_launches_count_every_fused_ops_kernels_in_a_step():
    """A fused step recorded with ``launches`` has no custom op left as
    one kernel: every one is its launches (LaViT: softmax_apply, alone
    and with the pooled DP loss, score_conv, the square maps' DP loss),
    and it issues more kernels than the one-op-each-way count."""
    def step(launches):  # a model of its own: no gradients to add to
        model = cm.build_on_meta(dict(type='LaViT', arch='small',
                                      attn_backend='triton'))
        return cm.record_step(model, (64, 96), launches=launches)

    ops = step(launches=True)
    fused = {r.name for r in ops if cm.is_fused(r.name)}
    assert fused and all('/' in name for name in fused)
    assert {name.split('/')[0] for name in fused} >= {
        'vitattn::softmax_apply', 'vitattn::softmax_apply_backward',
        'vitattn::softmax_apply_with_dp_loss',
        'vitattn::softmax_apply_with_dp_loss_backward',
        'vitattn::score_conv', 'vitattn::score_conv_backward',
        'vitattn::diagonality_loss', 'vitattn::diagonality_loss_backward'}
    assert len(ops) > len(step(launches=False))


def test_projection_time_formula():
    hw = cm.Hardware()
    ops = [cm.OpRecord('gemm', int(989e12 * 0.6 * 1e-3), 0, 'forward'),
           cm.OpRecord('copy', 0, int(3.35e12 * 0.8 * 1e-3), 'forward'),
           cm.OpRecord('tiny', 1, 1, 'backward')]
    proj = cm.project(ops, hw)
    # 1 ms of compute, 1 ms of memory, the 2.5 us floor
    assert math.isclose(proj.kernel_ms, 2.0025, rel_tol=1e-6)
    assert proj.ms == proj.kernel_ms  # 3 ops x 6 us of dispatch is less
    many = [cm.OpRecord('tiny', 1, 1, 'forward')] * 1000
    assert math.isclose(cm.project(many, hw).ms, 6.0)  # dispatch-bound


def test_calibration_recovers_the_parameters_of_a_run():
    """Step times made with known parameters: the fit finds them."""
    truth = cm.Hardware(mfu=0.4, bandwidth_efficiency=0.6, dispatch_us=8.,
                        fused_efficiency=0.1)
    gemm = cm.OpRecord('gemm', int(4e11), 0, 'forward')
    copy = cm.OpRecord('copy', 0, int(2e9), 'forward')
    tiny = cm.OpRecord('tiny', 1, 1, 'forward')
    fused = cm.OpRecord('vitattn::focused_linear_attention', 0, int(2e8),
                        'forward')
    # Compute-bound, memory-bound, dispatch-bound and fused-op steps.
    steps = [[gemm] * 20 + [tiny] * 10, [copy] * 20 + [tiny] * 10,
             [gemm, copy] + [tiny] * 2000, [gemm] * 5 + [copy] * 5,
             [copy] * 5 + [fused] * 10]
    samples = [(ops, cm.project(ops, truth).ms) for ops in steps]
    fitted, error = cm.calibrate(samples)
    assert (fitted.mfu, fitted.bandwidth_efficiency, fitted.dispatch_us,
            fitted.fused_efficiency) == (0.4, 0.6, 8., 0.1)
    assert error < 1e-6
    # Without a custom op in any step, the fused efficiency is not fitted.
    fitted, _ = cm.calibrate(samples[:4], cm.Hardware(fused_efficiency=0.3))
    assert fitted.fused_efficiency == 0.3


def test_only_the_packages_custom_ops_take_the_fused_efficiency():
    """A Triton kernel of this package runs at ``fused_efficiency`` of the
    roofline; aten's kernels and the cost model's own SDPA stand-in do
    not."""
    hw = cm.Hardware(fused_efficiency=0.25)
    ops = [cm.OpRecord(name, 0, int(1e9), 'forward') for name in (
        'vitattn::score_conv', 'vitattn_cost::fused_attention',
        'aten::add.Tensor')]
    times = [cm.project([op], hw).kernel_ms for op in ops]
    assert math.isclose(times[0], 4 * times[1]) and times[1] == times[2]


def test_a_backbone_step_projects():
    proj = cm.measure(dict(type='FLattenPVTv2', arch='b0'), (64, 96),
                      cm.Hardware(), top=3)
    assert proj.ops > 100 and proj.gflop > 0 and proj.ms > 0
    assert len(proj.top) == 3
    # Activations at least the stem's output (2 x 32 x 16 x 24, bf16),
    # kept by the first block's norm.
    assert proj.saved_gb * 1e9 > 2 * 32 * 16 * 24 * 2


def test_models_takes_a_baseline_alone(capsys):
    """``--models`` takes a baseline's label too (its row alone, no ratios,
    its top ops), whatever ``--backend`` says; an unknown label is an
    error that lists the families and the baselines."""
    cm.main(['--models', 'attnpvtv2-b0', '--sizes', '64x96', '--top', '2',
             '--backend', 'triton'])
    out = capsys.readouterr().out
    row, = [line for line in out.splitlines()
            if line.startswith('| AttnPVTv2-B0 |')]
    cells = [cell.strip() for cell in row.strip('|').split('|')]
    assert cells[5:8] == ['', '', ''] and cells[9] == ''  # no ratios
    assert int(cells[3]) > 100 and float(cells[8]) > 0  # ops, GB saved
    assert '* AttnPVTv2-B0: ' in out
    with pytest.raises(SystemExit):
        cm.main(['--models', 'AttnPVTv2-B1'])
    err = capsys.readouterr().err
    assert "unknown models ['AttnPVTv2-B1']" in err
    assert "'LaViT-S'" in err and "'AttnPVTv2-B0'" in err


def test_saved_activations_count_each_storage_once_and_no_weight():
    """What the forward keeps for the backward: the linear layer's input
    (its weight is a parameter, kept through a transposed view) and the
    exponential's output, once, though the product saves two slices of
    it again; the product's output is kept by nothing."""
    linear = nn.Linear(8, 16, bias=True, device='meta')
    x = torch.empty(4, 8, device='meta', requires_grad=True)
    with cm.SavedActivations(linear) as saved:
        y = linear(x).exp()
        out = (y[:, :8] * y[:, 8:]).sum()
    assert saved.nbytes == (4 * 8 + 4 * 16) * 4
    out.backward()  # the hooks are gone: the backward keeps its own
    assert saved.nbytes == (4 * 8 + 4 * 16) * 4


def test_saved_activations_of_a_step_are_the_forwards():
    """``record_step`` counts inside its forward only, in the autocast
    dtype: the convolution keeps the image cast to bf16 and the cached
    bf16 copy of its weight (a cast, not the parameter), GELU its bf16
    input."""
    model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.GELU()).to('meta')
    saved = cm.SavedActivations(model)
    cm.record_step(model, (8, 8), batch=2, activations=saved)
    image, conv_out = 2 * 3 * 8 * 8 * 2, 2 * 4 * 8 * 8 * 2
    weight = 4 * 3 * 2
    assert saved.nbytes == image + weight + conv_out


@pytest.mark.slow
def test_calibrate_refits_a_gpu_suite_run(tmp_path, capsys):
    """``benchmarks/calibrate.py`` reads a suite's train.csv, records each
    row's step as the suite projects it and fits the model: steps made
    with known parameters are fitted with no error, and each family's
    measured ratio is printed beside the projections."""
    import csv
    import sys
    sys.path.insert(0, osp.join(ROOT, 'benchmarks'))
    import calibrate
    from gpu_suite import MODEL_SPECS, build_model
    truth = cm.HARDWARE['h200-eager-2026-11']
    specs = {s.label: s for s in MODEL_SPECS}
    rows = []
    for label, shape in (('Swin-T', (64, 96)), ('FLatten-Swin-T', (64, 96)),
                         ('Swin-T', (96, 64)),
                         ('FLatten-Swin-T', (96, 64))):
        with torch.device('meta'):
            model = build_model(specs[label], False)
        ms = cm.project(cm.record_step(model, shape, 2, torch.bfloat16),
                        truth).ms
        rows.append(dict(model=label, role=specs[label].role,
                         baseline=specs[label].baseline or '',
                         height=shape[0], width=shape[1], batch=2,
                         precision='bf16', status='ok', attn_backend='',
                         step_ms=ms))
    path = tmp_path / 'train.csv'
    with open(path, 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    # A backends.csv: the fused step against the eager one.
    backends = tmp_path / 'backends.csv'
    fused_rows = []
    for backend in ('eager', 'triton'):
        with torch.device('meta'):
            model = build_model(specs['FLatten-Swin-T'], False,
                                attn_backend=backend)
        ms = cm.project(cm.record_step(model, (64, 96), 2, torch.bfloat16),
                        truth).ms
        fused_rows.append(dict(model='FLatten-Swin-T', height=64, width=96,
                               batch=2, precision='bf16', status='ok',
                               attn_backend=backend, step_ms=ms))
    with open(backends, 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=list(fused_rows[0]))
        writer.writeheader()
        writer.writerows(fused_rows)
    assert calibrate.main([str(path), str(backends)]) == 0
    out = capsys.readouterr().out
    assert 'RMS log error 0.00.' in out  # the fit's, last on its line
    family = [line for line in out.splitlines()
              if '| FLatten-Swin-T |' in line and '| Swin-T |' in line]
    assert len(family) == 2 and all(line.endswith('+0% |')
                                    for line in family)
    fused = [line for line in out.splitlines()
             if '| triton |' in line and '| eager |' in line]
    assert len(fused) == 1 and fused[0].endswith('+0% |')


@pytest.mark.slow
def test_the_h200_preset_is_the_fit_of_the_kept_gpu_runs():
    """``--hardware h200-eager-2026-11`` is what benchmarks/calibrate.py
    fits to the runs kept in benchmarks/gpu_runs/, not a number typed in."""
    import glob
    import sys
    sys.path.insert(0, osp.join(ROOT, 'benchmarks'))
    import calibrate
    paths = sorted(glob.glob(osp.join(ROOT, 'benchmarks', 'gpu_runs', '*',
                                      '*.csv')))
    rows = [r for p in paths if osp.basename(p) in ('train.csv',
                                                     'backends.csv')
            for r in calibrate.load_rows(p)]
    assert len(rows) == 24
    steps = calibrate.record(rows)
    fitted, error = cm.calibrate(
        [(steps[calibrate.step_key(r)], float(r['step_ms'])) for r in rows])
    assert fitted == cm.HARDWARE['h200-eager-2026-11']
    assert error < 0.2


def test_fit_peak_recovers_the_factor_of_peaks_made_with_it():
    samples = [(10**6, 3 * 2**30, 0.), (4 * 10**6, 2**29, 0.)]
    samples = [(p, s, cm.projected_peak_mib(p, s, 1.2)) for p, s, _ in samples]
    factor, error = cm.fit_peak(samples)
    assert factor == pytest.approx(1.2) and error == pytest.approx(0, abs=1e-9)


def test_the_peak_factor_is_the_fit_of_the_kept_gpu_runs():
    """``PEAK_PER_SAVED_BYTE`` is what benchmarks/calibrate.py fits to the
    measured peaks of the kept runs (each with what its step kept,
    recorded from the commit it measured), not a number typed in."""
    import glob
    import sys
    sys.path.insert(0, osp.join(ROOT, 'benchmarks'))
    import calibrate
    rows = [r for p in sorted(glob.glob(osp.join(
        ROOT, 'benchmarks', 'gpu_runs', '*', '*.csv')))
        if osp.basename(p) in ('train.csv', 'backends.csv')
        for r in calibrate.load_rows(p)]
    samples = calibrate.peak_samples(rows)
    assert len(samples) == 24
    factor, error = cm.fit_peak([(p, b, float(r['peak_mib']))
                                 for r, p, b in samples])
    assert round(factor, 2) == cm.PEAK_PER_SAVED_BYTE
    assert error < 0.06


def test_no_eager_step_takes_tensors_apart_by_select():
    """Issue 31's pass: no backbone's eager training step takes heads or
    q / k / v apart with ``select`` (whose backward writes a zero map of
    the whole tensor per piece, then adds them); ``unbind`` / ``chunk``
    give one gradient pass."""
    from tiny_backbones import registered_backbones, tiny_kwargs
    found = {}
    for name in registered_backbones():
        model = cm.build_on_meta(dict(type=name, attn_backend='eager',
                                      **tiny_kwargs(name)))
        ops = cm.record_step(model, (64, 96))
        count = sum(r.name == 'aten::select_backward' for r in ops)
        if count:
            found[name] = count
    assert found == {}


@pytest.mark.parametrize('num_heads', [1, 3, 8, 12])
def test_score_map_convs_take_every_head_at_once(num_heads):
    """Less-Attention's transform runs a fixed number of kernels whatever
    its heads where it projects a GPU's step (a loop over heads cost
    1,300 ops of LessAttn-Swin-T's 3,035): the key conv and, up to
    FOLDED_MIX_MAX_HEADS heads, one dense conv that is the query conv and
    the 1x1 head mix (two passes over the map each way); with more heads
    the two apart (three)."""
    from vitattn_mm.ops.score_conv import FOLDED_MIX_MAX_HEADS
    from vitattn_mm.models.attentions.less_attention.transforms import \
        ConvAttentionTransform
    transform = ConvAttentionTransform(num_heads, attn_backend='eager',
                                       ).to('meta')
    logits = torch.empty(2, num_heads, 35, 12, device='meta',
                         requires_grad=True)
    recorder = cm.StepRecorder()
    with recorder:
        out = transform(logits, (5, 7), (3, 4))
        recorder.phase = 'backward'
        out.sum().backward()
    convs = [r for r in recorder.ops if 'convolution' in r.name]
    passes = 2 if num_heads <= FOLDED_MIX_MAX_HEADS else 3
    assert [r.phase for r in convs] == \
        ['forward'] * passes + ['backward'] * passes
    assert len(recorder.ops) <= 16, [r.name for r in recorder.ops]


def test_calibrate_fits_a_run_to_the_steps_it_kept(tmp_path):
    """A run's steps.json (what the suite recorded when it ran) is what
    calibrate.py fits to, not a step recorded from today's code: a kept
    tally comes back op for op, and nothing is built for its row."""
    import sys
    sys.path.insert(0, osp.join(ROOT, 'benchmarks'))
    import calibrate
    ops = [cm.OpRecord('aten::mm', 100, 40, 'forward'),
           cm.OpRecord('aten::mm', 100, 40, 'backward'),
           cm.OpRecord('vitattn::focused_linear_attention', 7, 9, 'forward')]
    row = dict(model='No-Such-Model', height=64, width=96, batch=2,
               attn_backend='eager', source=str(tmp_path / 'train.csv'))
    key = calibrate.step_key(row)
    (tmp_path / calibrate.STEPS_FILE).write_text(
        json.dumps({calibrate.step_name(key): cm.tally(ops)}))
    steps = calibrate.record([row])  # builds nothing: the model is unknown
    got = sorted((r.name, r.flops, r.nbytes) for r in steps[key])
    assert got == sorted((r.name, r.flops, r.nbytes) for r in ops)
    assert cm.project(steps[key]).ms == cm.project(ops).ms


def test_sums_and_softmax_take_fp32_as_an_output_dtype():
    """CUDA autocast runs sums and softmax with ``dtype=float32`` (no cast
    of a sum's input: it reads bf16 in one kernel), and leaves a softmax
    that names its dtype as it is (one bf16 kernel)."""
    seen = {}

    def step(x):
        y = x @ x
        seen.update(sum=y.sum(-1).dtype, softmax=y.softmax(-1).dtype,
                    named=y.softmax(-1, dtype=y.dtype).dtype)
        return y

    ops = record(step, (8, 8), dtype=torch.bfloat16)
    assert seen == dict(sum=torch.float32, softmax=torch.float32,
                        named=torch.bfloat16)
    forward = names(ops, 'forward')
    # x's cast for the matmul, then the softmax's own cast of bf16 (aten
    # converts before its fp32 kernel); none for the sum or the named one.
    assert forward.count('aten::_to_copy') == 2


def test_softmax_of_kept_logits_writes_no_fp32_map():
    """Less-Attention's eager softmax of bf16 logits under autocast: one
    bf16 map each way, not an fp32 map with a cast on either side (and
    their gradients), as autocast would make of a plain softmax."""
    from vitattn_mm.ops import softmax_apply_eager
    ops = record_bf16(lambda logits, v: softmax_apply_eager(logits, v, None),
                      (2, 3, 40, 40), (2, 3, 40, 16))
    assert 'aten::_to_copy' not in names(ops)
    softmax = [r for r in ops if r.name == 'aten::_softmax']
    assert len(softmax) == 1
    # read and written in bf16: 2 bytes an entry each way
    assert softmax[0].nbytes == 2 * (2 * 2 * 3 * 40 * 40)


@pytest.mark.parametrize('query_hw, key_hw', [((8, 12), (4, 6)),
                                               ((6, 6), (6, 6))])
def test_dp_loss_of_the_layers_map_computes_no_softmax(query_hw, key_hw):
    """The DP loss given the bf16 map an LA layer's eager softmax wrote,
    under autocast: no softmax of its own either way, no cast of the map
    or of its gradient (LaViT's pooled maps: the blocks' mean reads it in
    bf16 and writes the pooled map in fp32, its gradient one bf16 map
    written from the pooled one, with the division; square maps: the
    terms read it as it is)."""
    from vitattn_mm.models.attentions.functional import masked_softmax
    from vitattn_mm.models.attentions.less_attention.loss import \
        diagonality_preserving_loss

    def step(logits, v):
        probs = masked_softmax(logits)
        return (probs @ v).sum() + diagonality_preserving_loss(
            logits, query_hw, key_hw, probs=probs)

    Nq, Nk = query_hw[0] * query_hw[1], key_hw[0] * key_hw[1]
    ops = record_bf16(step, (2, 3, Nq, Nk), (2, 3, Nk, 16))
    assert names(ops).count('aten::_softmax') == 1
    assert names(ops).count('aten::_softmax_backward_data') == 1
    bf16_map = 2 * (2 * 3 * Nq * Nk)
    casts = [r for r in ops if r.name == 'aten::_to_copy']
    assert casts and all(r.nbytes < bf16_map for r in casts)
    # The pooled map is divided by the blocks' size in no pass of its own.
    assert [r for r in ops if r.name.startswith('aten::div') and
            r.phase == 'forward' and r.nbytes >= 4 * (2 * 3 * Nk * Nk)] == []



def test_dp_loss_of_a_stages_maps_is_one_call():
    """The DP loss of a stage's LA maps (one shape, one weight), eagerly:
    four maps take the ops one does, and a copy that stacks them (one
    call of the terms, where each map's were some 25 ops, most on a few
    numbers per row)."""
    from vitattn_mm.models.attentions.less_attention.loss import \
        mean_diagonality_preserving_loss

    def ops_of(count):
        def step(*probs):
            return mean_diagonality_preserving_loss(
                [(p, (6, 6), (6, 6), 0.1, 'eager', p) for p in probs])
        return names(record_bf16(step, *[(2, 3, 36, 36)] * count))

    one, four = ops_of(1), ops_of(4)
    assert len(one) > 20
    assert sorted(four) == sorted(one + ['aten::stack']), \
        set(four) ^ set(one)


@pytest.mark.parametrize('pooled_in_passing', [True, False])
def test_pooled_dp_map_adds_its_gradient_in_passing(pooled_in_passing):
    """An LA layer's map with queries on a grid the key grid divides
    (LaViT's), eagerly, bf16 under autocast: it feeds the product with the
    values and, pooled, the DP loss. Pooled beside the product, the
    pooled map's gradient is added into the product's in the one pass that
    writes it: backward, one map-sized op more than the softmax's and the
    product's, reading one map and writing one (pooled by the loss, its
    gradient is a map of its own, which autograd adds: two ops, four
    maps)."""
    from vitattn_mm.models.attentions.less_attention.layers import \
        apply_softmax
    from vitattn_mm.models.attentions.less_attention.loss import \
        diagonality_preserving_loss
    # Blocks of 4 x 4 queries: the pooled map's ops (fp32) touch less
    # than a bf16 map.
    query_hw, key_hw = (16, 24), (4, 6)

    def step(logits, v):
        applied = apply_softmax(
            logits, v, None, 0., 'eager',
            (query_hw, key_hw) if pooled_in_passing else None)
        return applied.out.sum() + diagonality_preserving_loss(
            logits, query_hw, key_hw, probs=applied.probs)

    Nq, Nk = 16 * 24, 4 * 6
    ops = record_bf16(step, (2, 3, Nq, Nk), (2, 3, Nk, 16))
    bf16_map = 2 * (2 * 3 * Nq * Nk)
    maps = [r for r in ops
            if r.phase == 'backward' and r.nbytes >= bf16_map]
    # the product's two gradients (the map's and the values', which
    # reads it), the softmax's
    expected = ['aten::bmm', 'aten::bmm', 'aten::add.out',
                'aten::_softmax_backward_data']
    if not pooled_in_passing:
        expected[2] = 'aten::div.out'
        expected.append('aten::add.Tensor')
    assert sorted(r.name for r in maps) == sorted(expected)
    if pooled_in_passing:
        add, = [r for r in maps if r.name == 'aten::add.out']
        assert add.nbytes < 2 * bf16_map + 4 * (2 * 3 * Nk * Nk) + 1


def test_attention_residual_writes_its_map_once_each_way():
    """LaViT's Attention Residual from a VA layer's factors, bf16 under
    autocast: forward, the normalised map (one product) and its head mix
    (one conv), in bf16, with rows aligned for the fused kernel's mask;
    backward, those two ops' gradients and the aligning slice's. (Its norm,
    LayerScale and casts wrote and read eight more maps, one in fp32.)"""
    from vitattn_mm.models.attentions.less_attention import (
        AttentionResidual, LessAttentionState)
    residual = AttentionResidual(2, 5).to('meta')
    q, k = (torch.empty(2, 2, n, 32, device='meta', requires_grad=True)
            for n in (40 * 50, 1000))
    recorder = cm.StepRecorder()
    with recorder, cm.MetaAutocast():
        with torch.autocast('cpu', dtype=torch.bfloat16):
            out = residual(LessAttentionState(
                factors=(q, k, None), query_hw=(40, 50), key_hw=(25, 40)),
                (20, 25))
        recorder.phase = 'backward'
        out.backward(torch.empty_like(out))
    assert out.shape == (2, 5, 500, 1000) and out.dtype == torch.bfloat16
    assert out.stride(-2) % 16 == 0  # taken by the kernel without a copy
    smallest_map = 2 * (2 * 2 * 500 * 1000)  # h_in heads, bf16
    big = [(r.phase, r.name) for r in recorder.ops
           if r.nbytes >= smallest_map]
    assert sorted(big) == [
        ('backward', 'aten::bmm'), ('backward', 'aten::bmm'),
        ('backward', 'aten::convolution_backward'),
        ('backward', 'aten::slice_backward'),
        ('forward', 'aten::bmm'), ('forward', 'aten::convolution')]


def record_flatten_step(sr_ratio, cast_loss=True):
    """A FocusedLinearAttention's eager step (64 channels, 2 heads, 56 x 56
    bf16 tokens, so that the reduction's layout copy is not the
    features') under bf16 autocast on the meta device (a GPU's route):
    its output and the recorder. The loss is the output's mean, in fp32
    (``cast_loss``) or as it is."""
    from vitattn_mm.models.attentions.focused_linear import \
        FocusedLinearAttention
    with torch.device('meta'):
        attn = FocusedLinearAttention(64, 2, grid_size=(56, 56),
                                      sr_ratio=sr_ratio,
                                      attn_backend='eager')
    x = torch.empty(2, 56 * 56, 64, device='meta', dtype=torch.bfloat16,
                    requires_grad=True)
    recorder = cm.StepRecorder()
    with recorder, cm.MetaAutocast():
        with torch.autocast('cpu', dtype=torch.bfloat16):
            out, _ = attn(x, (56, 56))
        recorder.phase = 'backward'
        (out.float() if cast_loss else out).mean().backward()
    return out, recorder


@pytest.mark.parametrize('sr_ratio', [8, 1])
def test_focusing_takes_queries_and_keys_in_one_call_where_kernels_launch(
        sr_ratio):
    """FLatten's eager step on the meta device (a GPU's route): the
    focusing function runs once on queries and keys joined, one power and
    two norms forward, where two calls launched each twice; it writes them
    in the heads' layout, which the products read without a copy; the
    normaliser comes out of the product with the values (no sum of the
    keys, no product of its own); the products write their gradients
    into one tensor each (no concatenation of their parts)."""
    recorder = record_flatten_step(sr_ratio)[1]
    forward = names(recorder.ops, 'forward')
    assert forward.count('aten::pow.Tensor_Scalar') == 1
    assert forward.count('aten::linalg_vector_norm') == 2
    assert forward.count('aten::bmm') == 2
    assert 'aten::sum.dim_IntList' not in forward
    features = 2 * 56 * 56 * 64 * 4  # the queries' fp32 features
    assert not [r for r in recorder.ops if r.name == 'aten::clone'
                and r.phase == 'forward' and r.nbytes >= 2 * features]
    backward = names(recorder.ops, 'backward')
    # The focusing gradient's own four (two over the features) and the
    # output's one, straight into the product's gradient.
    assert backward.count('aten::div.Tensor') == 4
    # The focusing gradient from the features the products keep: no power
    # recomputed; two products (y . g, b a) and the products' one; the
    # scale's gradient one batched product of the maps with no map
    # written (the products' four besides).
    assert 'aten::pow.Tensor_Scalar' not in backward
    assert backward.count('aten::mul.Tensor') == 3
    assert backward.count('aten::bmm') + backward.count('aten::bmm.out') \
        == 5
    # The output's and the normaliser's, straight into the product's
    # gradient.
    assert backward.count('aten::div.out') == 2
    # The one of the projection's keys and values (chunk's gradient).
    assert backward.count('aten::cat') == 1


@pytest.mark.parametrize('sr_ratio', [8, 1])
def test_flatten_output_and_conv_are_summed_in_the_normalising_pass(
        sr_ratio):
    """FLatten's eager step under bf16 autocast on the meta device (a
    GPU's route): the normaliser's division writes the attention's fp32
    output plus the depthwise conv, heads merged, in bf16 (one op that
    reads the product and the conv and writes the bf16 tokens); no fp32
    output map is written, cast or added, nor its gradient cast back
    (two ops forward and one backward fewer than the division, the cast
    and the addition, and some six fp32 maps of traffic)."""
    out, recorder = record_flatten_step(sr_ratio, cast_loss=False)
    assert out.dtype == torch.bfloat16
    tokens = 2 * 56 * 56 * 64  # the output's entries
    product = 4 * 2 * 56 * 56 * (64 + 2)  # the fp32 product [o, m]
    written, = [r for r in recorder.ops if r.name == 'aten::addcdiv.out']
    # the product (its normaliser column the divisor), the bf16 conv in,
    # the bf16 output
    assert written.phase == 'forward'
    assert written.nbytes <= product + 2 * 2 * tokens
    # No cast reads or writes an fp32 map of the output's size (but the
    # values' gradient, where the values are as many as the tokens); no
    # sum of the output and the conv as a pass of its own.
    casts = [r for r in recorder.ops if r.name == 'aten::_to_copy'
             and r.nbytes >= 4 * tokens]
    assert len(casts) == (sr_ratio == 1), casts
    assert not [r for r in recorder.ops if r.name == 'aten::add.Tensor'
                and r.phase == 'forward' and r.nbytes >= 3 * 2 * tokens]


def test_relu_linear_attention_casts_and_scales_in_few_passes():
    """L2ViT's eager attention under bf16 (a GPU's step on the meta
    device): one ReLU and one cast for queries and keys together, the
    values cast with their column of ones in one copy (no pad, whose
    gradient is a copy), the output scaled by a product (no division's
    gradient over it) and cast back token-major in one copy, the
    products' gradients written into one tensor each. The scaling writes
    the output token-major in bf16 (no fp32 output to cast and merge, no
    cast of its gradient back)."""
    from vitattn_mm.ops import relu_linear_attention_eager
    qkv = torch.empty(2, 3136, 192, device='meta', dtype=torch.bfloat16,
                      requires_grad=True)
    temperature = torch.empty(2, 1, 1, device='meta', requires_grad=True)
    recorder = cm.StepRecorder()
    with recorder, cm.MetaAutocast():
        out = relu_linear_attention_eager(qkv, temperature, 2, 1e-6)
        recorder.phase = 'backward'
        out.float().mean().backward()
    forward = names(recorder.ops, 'forward')
    assert forward.count('aten::relu') == 1
    assert forward.count('aten::_to_copy') == 1  # the features'
    tokens = 2 * 3136 * 64
    written, = [r for r in recorder.ops if r.name == 'aten::mul.out'
                and r.phase == 'forward']
    # reads fp32 o, writes bf16 tokens
    assert written.nbytes <= 4 * tokens + 2 * tokens + 4 * 2 * 3136 * 2
    assert 'aten::constant_pad_nd' not in names(recorder.ops)
    values = 2 * 3136 * 64 * 4  # one of q, k, v in fp32
    assert not [r for r in recorder.ops if r.nbytes >= values and
                r.name in ('aten::div.Tensor', 'aten::clone')]
    # The products write their gradients into one tensor each, and the
    # projection's is written in place of its parts: no stack, no
    # concatenation, one cast of the queries' and keys' (in the ReLU's
    # gradient) and one of the values'; the upstream read as it is (the
    # two casts: the test's loss's cast of the output, and its gradient).
    backward = names(recorder.ops, 'backward')
    assert 'aten::stack' not in backward and 'aten::cat' not in backward
    casts = [r.nbytes for r in recorder.ops
             if r.name == 'aten::_to_copy' and r.phase == 'backward']
    assert casts == [6 * tokens] * 2, casts
    assert backward.count('aten::threshold_backward.grad_input') == 1


def test_diagonality_terms_take_one_row_maximum_and_one_tie_mask():
    """The eager DP-loss terms (a GPU's step on the meta device): one
    row maximum, of the map itself (the excess over the diagonal is the
    maximum less the diagonal: no masked copy of the map, no
    off-diagonal maximum), and the backward builds one tie mask (the
    ties of the row maximum are those of the off-diagonal one wherever
    they get a gradient), and its few per-row coefficients take few
    launches: no clamp, the tied entries' coefficient one expression,
    g P_ii / m^2, over a tie count that is never 0."""
    from vitattn_mm.ops.diagonality_loss import diagonality_loss_eager
    logits = torch.empty(2, 3, 49, 49, device='meta', requires_grad=True)
    recorder = cm.StepRecorder()
    with recorder, cm.MetaAutocast():
        loss = diagonality_loss_eager(logits)
        recorder.phase = 'backward'
        loss.backward()
    forward = names(recorder.ops, 'forward')
    backward = names(recorder.ops, 'backward')
    assert forward.count('aten::amax') == 1
    assert 'aten::masked_fill.Scalar' not in forward
    assert 'aten::clamp_min' not in names(recorder.ops)
    assert backward.count('aten::eq.Tensor') == 1
    assert backward.count('aten::div.Tensor') == 3


def test_mean_shift_logit_term_is_written_once():
    """MSF's eager attention in shifted windows (a GPU's bf16 step on the
    meta device): the key-norm term, Swin's bias and the mask are summed
    into one tensor as large as the logits, written once in bf16 with the
    rows the fused kernel reads in place (no add of that size, no cast,
    no padded copy, nor their gradients); the keys' gradient is one
    product (no division by the norm, no mask of its zeros)."""
    from vitattn_mm.ops import mean_shift_attention_eager
    windows, heads, N = 24, 3, 49
    qkv = torch.empty(2 * windows, N, 4 * 96, device='meta',
                      dtype=torch.bfloat16, requires_grad=True)
    bias = torch.empty(heads, N, N, device='meta', requires_grad=True)
    mask = torch.empty(windows, N, N, device='meta')
    recorder = cm.StepRecorder()
    with recorder, cm.MetaAutocast():
        out = mean_shift_attention_eager(qkv, bias, mask, heads, 32**-0.5,
                                         True)
        recorder.phase = 'backward'
        out.float().mean().backward()
    # Bytes of the term in fp32 (the per-image sum of bias and mask is
    # half as large at batch 2, and in the skeleton's step too).
    term = 2 * windows * heads * N * N * 4
    forward = [r for r in recorder.ops if r.phase == 'forward']
    assert [r.name for r in forward].count('aten::add.out') == 1
    assert not [r for r in forward if r.name in (
        'aten::add.Tensor', 'aten::_to_copy') and r.nbytes >= term]
    every = names(recorder.ops)
    for name in ('aten::constant_pad_nd', 'aten::slice_backward',
                 'aten::masked_fill_.Scalar', 'aten::div.Tensor'):
        assert name not in every, name


def test_shifted_window_mask_is_a_few_kernels():
    """Swin's shift mask at a detector's stage-1 grid (every shifted
    block builds it each step, on the GPU): 12 kernels, none copying a
    region at a time from a host scalar; under 15 bytes an entry of the
    mask in all (the comparison's bool and the fill of zeros with -100
    are 14), where the regions' differences, two compares and two fills
    moved 32.5."""
    from vitattn_mm.models.layers import shifted_window_mask
    with cm.StepRecorder() as recorder:
        mask = shifted_window_mask((203, 322), (7, 7), (3, 3), 'meta')
    every = names(recorder.ops)
    assert len(every) <= 12, every
    assert 'aten::copy_' not in every and 'aten::scalar_tensor' not in every
    assert sum(r.nbytes for r in recorder.ops) <= mask.numel() * 15


def test_cpe_of_an_fp32_stream_is_its_conv_each_way():
    """L2ViT's conditional position encoding of the fp32 residual stream
    under bf16 autocast: the map plus its depthwise conv in one fp32 conv
    (the identity in its centre taps): no map-sized sum forward, nor the
    sum of the two paths' gradients backward, no cast of the map."""
    from vitattn_mm.models.layers.pos_embed import \
        ConditionalPositionEncoding
    cpe = ConditionalPositionEncoding(64, 64).to('meta')
    hw = (200, 320)
    ops = record(lambda x: cpe(x, hw), (2, hw[0] * hw[1], 64),
                 dtype=torch.bfloat16)
    big = 2 * hw[0] * hw[1] * 64 * 4
    assert names(ops, 'forward').count('aten::convolution') == 1
    assert names(ops, 'backward').count('aten::convolution_backward') == 1
    assert not [r for r in ops if r.name in (
        'aten::add.Tensor', 'aten::_to_copy') and r.nbytes >= big], [
            (r.phase, r.name) for r in ops if r.nbytes >= big]


@pytest.mark.parametrize('cfg', [
    dict(type='SpatialReductionAttention', sr_ratio=1),
    dict(type='SpatialReductionAttention', sr_ratio=2),
    dict(type='FocusedLinearAttention', sr_ratio=1, grid_size=(8, 12)),
    dict(type='FocusedLinearAttention', sr_ratio=2, grid_size=(8, 12)),
])
def test_tokens_for_two_projections_are_cast_once_each_way(
        monkeypatch, cfg):
    """fp32 tokens that reach q and kv (or q and the reduction) under bf16
    autocast: one cast of the token map fewer each way than autocast's
    own casts take (one for each op, and autograd casts each gradient
    back)."""
    from vitattn_mm.models.attentions import focused_linear, \
        spatial_reduction
    from vitattn_mm.registry import ATTENTIONS
    attn = ATTENTIONS.build(dict(cfg, embed_dims=32, num_heads=2)).to(
        'meta')
    tokens = torch.empty(2, 8 * 12, 32, device='meta', requires_grad=True)

    def token_casts():
        recorder = cm.StepRecorder()
        with recorder, cm.MetaAutocast():
            x = tokens * 1  # activations: autocast caches a leaf's cast
            with torch.autocast('cpu', dtype=torch.bfloat16):
                out = attn(x, (8, 12))[0]
            recorder.phase = 'backward'
            out.sum().backward()
        phases = [r.phase for r in recorder.ops if r.name == 'aten::_to_copy'
                  and r.nbytes == (4 + 2) * tokens.numel()]
        return phases.count('forward'), phases.count('backward')

    forward, backward = token_casts()
    for module in (focused_linear, spatial_reduction):
        monkeypatch.setattr(module, 'autocast_once', lambda x: (x, x))
    assert token_casts() == (forward + 1, backward + 1)


@pytest.mark.parametrize('stream_dtype', [torch.float32, torch.bfloat16])
def test_residual_with_drop_path_is_one_pass_each_way(stream_dtype):
    """A block's residual in training with stochastic depth (the meta
    device, as the GPU runs it): one op over the tokens forward (the
    scaled branch added), one backward (the branch's gradient, written in
    its dtype: no cast of its own), where mmcv's ``DropPath`` and the sum
    take three each way."""
    from mmcv.cnn.bricks import DropPath

    from vitattn_mm.models.layers.drop_path import add_residual
    shape = (2, 4096, 96)
    identity = torch.empty(shape, device='meta', dtype=stream_dtype,
                           requires_grad=True)
    branch = torch.empty(shape, device='meta', dtype=torch.bfloat16,
                         requires_grad=True)
    recorder = cm.StepRecorder()
    with recorder:
        out = add_residual(identity, branch, DropPath(0.1).train())
        recorder.phase = 'backward'
        # (no leaves' gradients accumulated: a block's inputs are none)
        torch.autograd.grad(out, (identity, branch), torch.empty_like(out))
    tokens = math.prod(shape)
    big = [(r.phase, r.name) for r in recorder.ops if r.nbytes >= tokens]
    assert big == [('forward', 'aten::addcmul'),
                   ('backward', 'aten::addcmul.out')], big
    written, = [r for r in recorder.ops if r.name == 'aten::addcmul.out']
    # reads the upstream, writes the branch's bf16 gradient
    assert written.nbytes <= (stream_dtype.itemsize + 2) * tokens + 64


@pytest.mark.parametrize('cfg', [
    dict(type='AttnSwinTransformer', arch='tiny', depths=(1, 1, 1, 1)),
    dict(type='AttnPVTv2', arch='b0'), dict(type='L2ViT', arch='tiny')],
    ids=['swin-block', 'pvtv2-conv-ffn', 'l2vit-block'])
def test_every_residual_of_a_step_adds_its_dropped_path_in_one_pass(cfg):
    """The skeletons' blocks, PVTv2's conv FFN and L2ViT's block (its LCM
    too) add each stochastic-depth branch with :func:`add_residual`: one
    ``addcmul`` per mask drawn, and no product or division of a token map
    by a per-sample factor (mmcv's ``DropPath``)."""
    def forward_ops(rate):
        model = cm.build_on_meta(dict(cfg, drop_path_rate=rate))
        return names(cm.record_step(model, (224, 224)), 'forward')

    dropping, plain = forward_ops(0.3), forward_ops(0.)
    draws = dropping.count('aten::rand')
    assert draws > 0 and dropping.count('aten::addcmul') == draws
    for op in ('aten::div.Tensor', 'aten::mul.Tensor'):
        assert dropping.count(op) == plain.count(op), op
