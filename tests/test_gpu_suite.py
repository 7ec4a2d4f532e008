"""benchmarks/gpu_suite.py: the prepared GPU run, rehearsed on the CPU.

The suite's ``--smoke`` mode runs every section on the CPU with tiny archs
and sizes, in a subprocess as the GPU session will; the tables it leaves
must hold one row per model (or attention) and setting, with finite numbers
wherever the measurement ran. The budget and time-limit helpers are tested
in-process.
"""
import csv
import importlib.util
import json
import math
import os
import os.path as osp
import subprocess
import sys
import time

import pytest
import torch

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
SCRIPT = osp.join(ROOT, 'benchmarks', 'gpu_suite.py')


def _load_suite():
    spec = importlib.util.spec_from_file_location('gpu_suite', SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # torch only; main() imports vitattn_mm
    return module


suite = _load_suite()


def _rows(out, name):
    with open(osp.join(out, f'{name}.csv')) as f:
        return list(csv.DictReader(f))


def _finite(value):
    return value not in ('', None) and math.isfinite(float(value))


def _smoke_run(out):
    # The fused ops' CPU path (their eager composition) in the smoke run:
    # the interpreted kernels are tests/test_kernels.py's.
    proc = subprocess.run(
        [sys.executable, SCRIPT, '--device', 'cpu', '--smoke', '--out', out],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env=dict(os.environ, TRITON_INTERPRET='0'))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_smoke_run(tmp_path):
    """One smoke run (a subprocess, as on the GPU machine), every table
    checked: one item, so the run is not repeated on each test worker."""
    out = str(tmp_path)
    stdout = _smoke_run(out)
    _check_every_table(out, stdout)
    _check_train_rows(out)
    _check_backend_rows(out)
    _check_numerics_rows(out)
    _check_core_rows(out)
    _check_compile_rows(out)
    _check_kept_steps(out)


def _check_kept_steps(out):
    """The run keeps the step it projected for each measured bf16 row
    (steps.json), so a later fit compares the time with the step that
    ran: the kept step projects to the row's projected_ms."""
    sys.path.insert(0, osp.join(ROOT, 'benchmarks'))
    import calibrate
    import cost_model
    kept = json.load(open(osp.join(out, calibrate.STEPS_FILE)))
    rows = [r for r in _rows(out, 'train') + _rows(out, 'backends')
            if r['precision'] == 'bf16' and r['projected_ms']]
    assert rows
    for r in rows:
        ops = cost_model.untally(kept[calibrate.step_name(
            calibrate.step_key(r))])
        assert cost_model.project(ops).ms == pytest.approx(
            float(r['projected_ms']), rel=1e-6)


def _check_every_table(out, stdout):
    for name in ('env.json', 'train.csv', 'backends.csv', 'numerics.csv',
                 'core.csv', 'compile.csv', 'summary.md'):
        assert osp.isfile(osp.join(out, name)), name
    summary = open(osp.join(out, 'summary.md')).read()
    for name in suite.SECTIONS:  # a default run's; --only adds the others
        assert f'## {suite.SECTION_TITLES[name]}' in summary
    assert '## Headline' in summary and '**' in summary
    assert 'Headline' in stdout  # printed last: the device reply's tail
    env = json.load(open(osp.join(out, 'env.json')))
    assert env['device'] == 'cpu' and env['torch'] and env['smoke'] is True
    assert env['arch_errors'] == {}  # every real arch name exists
    assert set(env['section_s']) == set(suite.SECTIONS)


def _check_train_rows(out):
    rows = _rows(out, 'train')
    settings = suite.Settings.smoke()
    expected = {(s.label, f'{h}x{w}', p) for s in suite.MODEL_SPECS
                for h, w in settings.resolutions for p in suite.PRECISIONS}
    got = [(r['model'], f"{r['height']}x{r['width']}", r['precision'])
           for r in rows]
    assert sorted(got) == sorted(expected)  # one row each, no more
    for r in rows:
        assert r['status'] == 'ok', r
        assert float(r['images_per_s']) > 0 and _finite(r['step_ms'])
        # The cost model's projection beside every autocast row.
        projected = r['precision'] in suite.PROJECTED
        assert (r['projected_ms'] != '') is projected, r
        # And its projected peak, from the model's parameters and what its
        # step keeps (more than nothing), as a later fit reads them.
        assert (r['projected_peak_mib'] != '') is projected, r
        if projected:
            import vitattn_mm  # noqa: F401  (registers the classes)
            with torch.device('meta'):
                model = suite.build_model(suite.SPECS[r['model']], True)
            assert int(r['parameters']) == sum(
                p.numel() for p in model.parameters())
            assert float(r['saved_mib']) > 0
            assert float(r['projected_peak_mib']) == pytest.approx(
                suite.cost_model.projected_peak_mib(
                    int(r['parameters']), float(r['saved_mib']) * 2**20))
        if r['role'] == 'family':
            assert r['baseline'] == suite.SPECS[r['model']].baseline
            assert _finite(r['speed_ratio']), r
            assert r['attn_backend'] == 'eager'  # 'auto' on the CPU
            if projected:
                assert _finite(r['projected_speed_ratio']), r
                assert _finite(r['ratio_error']), r


def _check_backend_rows(out):
    """Every family eager and fused, the same step, each projected."""
    rows = _rows(out, 'backends')
    assert sorted((r['model'], r['attn_backend']) for r in rows) == sorted(
        (s.label, b) for s in suite.FAMILIES for b in ('eager', 'triton'))
    for r in rows:
        assert r['status'] == 'ok', r
        assert float(r['step_ms']) > 0 and float(r['projected_ms']) > 0
        assert float(r['projected_peak_mib']) > 0
        if r['attn_backend'] == 'triton':
            assert _finite(r['speed_ratio']), r
            assert _finite(r['projected_speed_ratio']), r


def _check_numerics_rows(out):
    rows = _rows(out, 'numerics')
    expected = {(s.label, p) for s in suite.MODEL_SPECS
                for p in ('fp16', 'bf16')}
    assert sorted((r['model'], r['precision']) for r in rows) == \
        sorted(expected)
    for r in rows:
        assert r['status'] == 'ok', r
        assert r['finite'] == 'True', r
        assert int(r['steps_run']) == int(r['steps'])
        assert _finite(r['first_loss']) and _finite(r['last_loss'])
        if r['precision'] == 'fp16':
            assert 0 <= int(r['skipped_steps']) <= int(r['steps'])
            assert _finite(r['final_scale'])


def _check_core_rows(out):
    rows = _rows(out, 'core')
    grids = [f'{h}x{w}' for h, w in suite.Settings.smoke().core_grids]
    modules = [r for r in rows if r['family'] != 'reference']
    # bf16 rows of a module with a fused op come twice: also '[eager]'.
    fused = {c.label for c in suite.CORE_SPECS if any(
        isinstance(getattr(m, 'attn_backend', None), str)
        for m in suite.build_attention_layers(c).modules())}
    assert fused >= {'FocusedLinearAttention', 'LinearGlobalAttention'} & {
        c.label for c in suite.CORE_SPECS}
    assert sorted((r['attention'], r['family'], r['grid'], r['precision'])
                  for r in modules) == sorted(
        [(c.label, c.family, g, p) for c in suite.CORE_SPECS for g in grids
         for p in ('fp32', 'bf16')] +
        [(c.label + ' [eager]', c.family, g, 'bf16')
         for c in suite.CORE_SPECS if c.label in fused for g in grids])
    references = {(r['grid'], r['embed_dims'], r['heads'], r['precision'])
                  for r in rows if r['family'] == 'reference'}
    assert references == {(g, str(c.embed_dims), str(c.num_heads), p)
                          for c in suite.CORE_SPECS for g in grids
                          for p in ('fp32', 'bf16')}
    for r in rows:
        assert r['status'] == 'ok', r
        assert float(r['fwd_bwd_ms']) > 0
        if r['family'] != 'reference':
            assert _finite(r['sdpa_ms']) and _finite(r['time_ratio']), r


def _check_compile_rows(out):
    rows = _rows(out, 'compile')
    assert sorted(r['model'] for r in rows) == sorted(suite.SPECS)
    compiled = suite.Settings.smoke().compile_models
    for r in rows:
        if r['model'] not in compiled:
            assert r['status'] == 'skipped'
            continue
        assert r['status'] == 'ok', r
        for key in ('eager_ms', 'compiled_ms', 'speedup', 'compile_s'):
            assert _finite(r[key]), (key, r)
        assert int(r['graphs']) >= 1 and int(r['recompiled_graphs']) >= 0


def test_budget_reserves_the_later_sections():
    budget = suite.Budget(100, ['train', 'core'],
                          dict(train=0.6, numerics=0.2, core=0.2))
    # train is sure of 0.6 / (0.6 + 0.2) of the budget; core gets the rest
    assert 70 < budget.open('train') <= 75
    assert 95 < budget.open('core') <= 100


def test_time_limit_stops_a_measurement():
    start = time.perf_counter()
    with pytest.raises(suite.MeasurementTimeout):
        with suite.time_limit(0.2):
            while True:
                time.sleep(0.01)
    assert time.perf_counter() - start < 2


def test_first_takes_output_of_either_convention():
    assert suite.first(('out', 'state')) == 'out'
    assert suite.first('out') == 'out'


def test_only_rejects_unknown_sections():
    with pytest.raises(SystemExit):
        suite.parse_args(['--only', 'train,nonsense'])
    args = suite.parse_args(['--only', 'core, compile', '--out', 'x'])
    assert args.sections == ('core', 'compile')


def test_train_section_measures_bf16_at_every_size_first():
    """A budget that runs out drops precisions, not families: every model
    is measured in bf16 at both sizes before fp16, and fp32 last."""
    sizes = [(800, 1280), (512, 2048)]
    assert suite.train_order(sizes) == [
        ((800, 1280), 'bf16'), ((512, 2048), 'bf16'),
        ((800, 1280), 'fp16'), ((512, 2048), 'fp16'),
        ((800, 1280), 'fp32'), ((512, 2048), 'fp32')]


def test_models_selects_labels_in_the_suites_order():
    """``--models`` narrows every section to the named models (a short GPU
    lease measures what is missing); an unknown label lists the valid."""
    with pytest.raises(SystemExit):
        suite.parse_args(['--models', 'Swin-T,Nonsense-Net'])
    args = suite.parse_args(['--models', 'LaViT-S, FLatten-Swin-T'])
    assert [s.label for s in args.specs] == ['FLatten-Swin-T', 'LaViT-S']
    ctx = suite.Context(torch.device('cpu'), suite.Settings.smoke(), None,
                        'x', True, args.specs)
    assert [s.label for s in ctx.families] == ['FLatten-Swin-T', 'LaViT-S']
    assert ctx.baselines == []
    assert len(suite.parse_args([]).specs) == len(suite.MODEL_SPECS)


def test_a_fused_step_is_kept_as_launched_too(tmp_path):
    """A fused step the suite projects (its default record, one op each
    way per custom op) is kept in steps.json beside its record as
    launched ('|launched': each Triton launch a kernel), which
    ``calibrate.py --launches`` fits to; an eager step has none."""
    sys.path.insert(0, osp.join(ROOT, 'benchmarks'))
    import calibrate
    ctx = suite.Context(torch.device('cpu'), suite.Settings.smoke(), None,
                        str(tmp_path), True)
    spec = suite.SPECS['FLatten-PVT-T']
    for backend in ('triton', None):
        assert ctx.projected_step(spec, (64, 96), 'bf16', backend)
    kept = json.load(open(tmp_path / calibrate.STEPS_FILE))
    assert set(kept) == {'FLatten-PVT-T|64x96|triton',
                         'FLatten-PVT-T|64x96|triton|launched',
                         'FLatten-PVT-T|64x96|'}
    launched = {name for name, *_ in kept['FLatten-PVT-T|64x96|triton|'
                                          'launched']}
    assert 'vitattn::focused_linear_attention/state_kernel' in launched
    assert 'vitattn::focused_linear_attention' in {
        name for name, *_ in kept['FLatten-PVT-T|64x96|triton']}
    # What calibrate.py fits with --launches, read back from the file.
    row = dict(model='FLatten-PVT-T', height=64, width=96, batch=2,
               attn_backend='triton', source=str(tmp_path / 'x.csv'))
    steps = calibrate.record([row], launched=True)
    assert {r.name for r in steps[calibrate.step_key(row)]} == launched


def test_kernels_section_ranks_a_steps_kernels_by_time():
    """``--only kernels`` (not in a default run, which brings back the
    device tool's 8 files at most) lists a step's ops by time: on the CPU
    its host clock only, an 'all ops' row with the profiled step's wall
    time, then the top ones, largest first, their shares of the whole."""
    assert 'kernels' not in suite.parse_args([]).sections
    assert suite.parse_args(['--only', 'kernels']).sections == ('kernels', )
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3),
                                torch.nn.Conv2d(8, 4, 1))
    rows = suite.top_kernels(model, torch.device('cpu'), (16, 16), 2,
                             'fp32', steps=2, top=4)
    assert {r['clock'] for r in rows} == {'host'}
    assert rows[0]['kernel'] == 'all ops' and rows[0]['share'] == 1.
    # The ops' own host time is part of the step's wall time.
    assert 0 < rows[0]['ms_per_step'] <= rows[0]['step_ms']
    assert 1 <= len(rows) - 1 <= 4
    times = [r['ms_per_step'] for r in rows[1:]]
    assert times == sorted(times, reverse=True)
    assert sum(r['share'] for r in rows[1:]) <= 1. + 1e-9
    assert any('convolution' in r['kernel'] for r in rows[1:])


def test_a_gpu_profile_ranks_each_clock_apart():
    """On a GPU the kernels' device time and the ops' host time are ranked
    apart, each clock's whole first (beside the step's wall time), so a
    step bound by the host (a fused op's Python and launches) shows as
    host time near the step's and device time far below it."""
    events = [('a_kernel', 6, 300.), ('b_kernel', 2, 900.),
              ('idle', 1, 0.)]
    device = suite._ranked(events, steps=3, top=1, clock='device',
                           step_ms=2.5)
    assert [r['kernel'] for r in device] == ['all kernels', 'b_kernel']
    assert device[0]['ms_per_step'] == pytest.approx(0.4)
    # Events that took no time (an idle marker) are no calls.
    assert device[0]['calls_per_step'] == pytest.approx(8 / 3)
    assert device[0]['step_ms'] == 2.5 and 'step_ms' not in device[1]
    assert device[1]['share'] == pytest.approx(0.75)
    host = suite._ranked([('vitattn::softmax_apply', 3, 6000.)], steps=3,
                         top=5, clock='host', step_ms=2.5)
    assert [r['kernel'] for r in host] == ['all ops',
                                           'vitattn::softmax_apply']
    assert {r['clock'] for r in host} == {'host'}


def test_a_gpu_profiles_kernels_stand_beside_their_projection(tmp_path):
    """On a GPU each Triton kernel's measured device time stands beside
    the cost model's projection of it (its step recorded as launched,
    summed over the ops that launch it), and the step's kernels beside the
    projected step's: the share of the roofline each reaches, which tells
    a slow kernel from a step bound by its host."""
    import vitattn_mm  # noqa: F401  (registers the backbones)
    hw = suite.cost_model.Hardware()
    second = hw.bandwidth_tbs * 1e12 * hw.bandwidth_efficiency  # B/s
    ops = [suite.cost_model.OpRecord(name, 0, int(second * 1e-3), phase)
           for name, phase in (
               ('vitattn::score_conv/conv_pass_kernel', 'forward'),
               ('vitattn::score_conv_backward/conv_pass_kernel',
                'backward'),
               ('aten::add.Tensor', 'backward'))]
    projected = suite.projected_kernel_ms(ops, hw)
    assert projected == pytest.approx({'all kernels': 3.,
                                       'conv_pass_kernel': 2.})
    rows = [dict(clock='device', kernel='all kernels', ms_per_step=12.),
            dict(clock='device', kernel='conv_pass_kernel', ms_per_step=8.),
            dict(clock='device', kernel='elementwise_kernel',
                 ms_per_step=1.),
            dict(clock='host', kernel='all ops', ms_per_step=20.),
            # A name as a profiler may decorate it.
            dict(clock='device', kernel='conv_pass_kernel_0d1d2d',
                 ms_per_step=4.)]
    rows = suite.with_projection(rows, projected)
    assert rows[0]['of_roofline'] == pytest.approx(0.25)
    assert rows[1]['projected_ms_per_step'] == pytest.approx(2.)
    assert rows[1]['of_roofline'] == pytest.approx(0.25)
    assert rows[4]['of_roofline'] == pytest.approx(0.5)
    # An aten kernel's name is not its op's; the host clock has no
    # projection.
    assert 'of_roofline' not in rows[2] and 'of_roofline' not in rows[3]
    spec = suite.SPECS['FLatten-PVT-T']
    cpu = suite.Context(torch.device('cpu'), suite.Settings.smoke(), None,
                        str(tmp_path), True)
    assert cpu.projected_kernels(spec, (64, 96), 'triton') == {}
    # (The projection is recorded on the meta device: no GPU needed.)
    gpu = suite.Context(torch.device('cuda'), suite.Settings.smoke(), None,
                        str(tmp_path), True)
    fused = gpu.projected_kernels(spec, (64, 96), 'triton')
    assert {'all kernels', 'state_kernel', 'output_kernel',
            'query_backward_kernel', 'key_backward_kernel'} <= set(fused)
    assert sum(ms for name, ms in fused.items()
               if name != 'all kernels') < fused['all kernels']
    assert set(gpu.projected_kernels(spec, (64, 96), 'eager')) == {
        'all kernels'}


def test_launch_settings_are_set_inside_and_restored_after():
    """The tuning section sets a kernel module's launch settings for one
    measurement: its own come back after, even after an error; a setting
    the module does not have is refused by name; every setting in the
    grid is one the module has, its own first."""
    from vitattn_mm.ops import triton_linear_attention as tk
    own = (tk.BLOCK_N, tk.NUM_WARPS)
    with suite.launch_settings('triton_linear_attention', BLOCK_N=16,
                               NUM_WARPS=2):
        assert (tk.BLOCK_N, tk.NUM_WARPS) == (16, 2)
    assert (tk.BLOCK_N, tk.NUM_WARPS) == own
    with pytest.raises(RuntimeError):
        with suite.launch_settings('triton_linear_attention', BLOCK_N=64):
            raise RuntimeError('a failed measurement')
    assert (tk.BLOCK_N, tk.NUM_WARPS) == own
    with pytest.raises(AttributeError, match='BLOCK_Z'):
        with suite.launch_settings('triton_linear_attention', BLOCK_Z=1):
            pass
    import importlib
    for module, grid in suite.TUNING_GRID.items():
        target = importlib.import_module(f'vitattn_mm.ops.{module}')
        assert grid[0] == {k: getattr(target, k) for k in grid[0]}, module
        assert all(set(values) == set(grid[0]) for values in grid)
    used = {m for modules in suite.FUSED_MODULES.values() for m in modules}
    assert used == set(suite.TUNING_GRID)
    assert set(suite.FUSED_MODULES) == {s.label for s in suite.FAMILIES}


def test_tuning_names_the_best_setting_of_each_module(tmp_path):
    """The tuning table ends with each family's fastest measured setting
    per kernel module (failed rows left out)."""
    table = suite.Table('tuning', suite.TUNING_COLUMNS, str(tmp_path))
    for setting, ms, status in (('BLOCK_N=32 NUM_WARPS=4', 60., 'ok'),
                                ('BLOCK_N=16 NUM_WARPS=8', 50., 'ok'),
                                ('BLOCK_N=64 NUM_WARPS=8', None, 'error')):
        table.add(model='FLatten-Swin-T', module='triton_linear_attention',
                  setting=setting, status=status, step_ms=ms,
                  speed_ratio=ms and 60. / ms, note='')
    best = suite.best_settings(table)
    assert [r['setting'] for r in best] == ['BLOCK_N=16 NUM_WARPS=8']
    text = suite.tuning_markdown(table)
    assert ('Best for FLatten-Swin-T / triton_linear_attention: '
            'BLOCK_N=16 NUM_WARPS=8 (1.20x its own setting)') in text
