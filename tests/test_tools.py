"""The command-line tools end to end, as a user runs them."""
import glob
import importlib.util
import os
import os.path as osp
import re
import socket
import subprocess
import sys

import pytest
import torch

from vitattn_mm.models.checkpoint.files import UnsafeCheckpointError  # noqa: F401

pytestmark = pytest.mark.slow

DEMO_CONFIG = 'configs/demo/mask-rcnn_flatten-swin-nano_fpn_8e_demo.py'
# Smoke runs: skip the demo config's untrained-model evaluation and
# validate on 4 images only.
NO_BASELINE_EVAL = ('--cfg-options', 'custom_hooks=[]',
                    'val_dataloader.dataset.indices=4')
MASK_RCNN_FLATTEN_SWIN_T = (
    'configs/flatten/mask-rcnn_flatten-swin-t_fpn_1x_coco.py')
VIT_TI = 'configs/msf/vit-ti-softmax_4xb256-300e_in1k.py'
UPERNET_SWIN_T = (
    'configs/baselines/upernet_swin-t-p4-w7_8xb2-160k_ade20k-512x512.py')


def run(*args, env=None, check=True):
    result = subprocess.run([*args], capture_output=True, text=True,
                            env={**os.environ, **(env or {})})
    if check and result.returncode != 0:
        raise AssertionError(f'{args} failed:\n{result.stdout[-3000:]}\n'
                             f'{result.stderr[-3000:]}')
    return result


def free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


@pytest.fixture(scope='module')
def trained(demo_data, tmp_path_factory):
    """tools/train.py on demo data: 2 iterations, checkpoint written."""
    work_dir = str(tmp_path_factory.mktemp('train'))
    run(sys.executable, 'tools/train.py', DEMO_CONFIG, '--demo', demo_data,
        '--demo-iters', '2', '--work-dir', work_dir, *NO_BASELINE_EVAL)
    checkpoint = osp.join(work_dir, 'iter_2.pth')
    assert osp.isfile(checkpoint)
    return work_dir, checkpoint


def test_test_py_evaluates_trained_checkpoint(trained, demo_data, tmp_path):
    _, checkpoint = trained
    out = str(tmp_path / 'results.pkl')
    result = run(sys.executable, 'tools/test.py', DEMO_CONFIG, checkpoint,
                 '--demo', demo_data, '--work-dir', str(tmp_path), '--out',
                 out, '--cfg-options', 'test_dataloader.dataset.indices=4')
    log = result.stdout + result.stderr
    assert re.search(r'coco/bbox_mAP: \d\.\d+', log)
    assert re.search(r'coco/segm_mAP: \d\.\d+', log)
    assert osp.getsize(out) > 0


def test_test_py_refuses_crafted_checkpoint(trained, demo_data, tmp_path):
    _, checkpoint = trained
    marker = tmp_path / 'executed'
    state = torch.load(checkpoint, map_location='cpu', weights_only=False)
    state['meta']['payload'] = _Payload(str(marker))
    evil = str(tmp_path / 'evil.pth')
    torch.save(state, evil)
    result = run(sys.executable, 'tools/test.py', DEMO_CONFIG, evil, '--demo',
                 demo_data, '--work-dir', str(tmp_path), check=False)
    assert result.returncode != 0
    assert 'UnsafeCheckpointError: Refusing to load checkpoint' in result.stderr
    assert 'posix.system' in result.stderr
    assert not marker.exists()


class _Payload:

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f'touch {self.marker}', ))


def test_train_py_resumes(trained, demo_data):
    work_dir, _ = trained
    result = run(sys.executable, 'tools/train.py', DEMO_CONFIG, '--demo',
                 demo_data, '--demo-iters', '3', '--work-dir', work_dir,
                 '--resume', *NO_BASELINE_EVAL)
    log = result.stdout + result.stderr
    assert 'resumed epoch: 0, iter: 2' in log
    assert osp.isfile(osp.join(work_dir, 'iter_3.pth'))


def test_train_py_resumes_past_a_checkpoint_cut_short(demo_data, tmp_path):
    """A kill or a full disk during a write leaves the latest checkpoint
    cut short: ``--resume`` names it, resumes from the newest whole one and
    the run finishes; checkpoints are written whole (no temporary file is
    left, each reads)."""
    work_dir = str(tmp_path)
    options = ('--cfg-options', 'custom_hooks=[]',
               'val_dataloader.dataset.indices=4',
               'default_hooks.checkpoint.interval=1',
               'default_hooks.checkpoint.max_keep_ckpts=-1')
    run(sys.executable, 'tools/train.py', DEMO_CONFIG, '--demo', demo_data,
        '--demo-iters', '2', '--work-dir', work_dir, *options)
    latest = osp.join(work_dir, 'iter_2.pth')
    with open(osp.join(work_dir, 'last_checkpoint')) as f:
        assert f.read().strip() == latest
    with open(latest, 'rb+') as f:
        f.truncate(osp.getsize(latest) // 2)
    result = run(sys.executable, 'tools/train.py', DEMO_CONFIG, '--demo',
                 demo_data, '--demo-iters', '3', '--work-dir', work_dir,
                 '--resume', *options)
    log = result.stdout + result.stderr
    whole = osp.join(work_dir, 'iter_1.pth')
    assert f'The latest checkpoint {latest} does not read' in log
    assert f'resuming from {whole}, the newest whole checkpoint' in log
    assert 'resumed epoch: 0, iter: 1' in log
    assert not glob.glob(osp.join(work_dir, '*.partial'))
    for step in (1, 2, 3):
        torch.load(osp.join(work_dir, f'iter_{step}.pth'),
                   map_location='cpu', weights_only=False)


def test_train_py_amp_on_cpu_uses_bf16_autocast(demo_data, tmp_path):
    result = run(sys.executable, 'tools/train.py', DEMO_CONFIG, '--demo',
                 demo_data, '--demo-iters', '1', '--amp', '--work-dir',
                 str(tmp_path), *NO_BASELINE_EVAL)
    log = result.stdout + result.stderr
    assert "type='AutocastOptimWrapper'" in log
    assert "modules=(\n" in log or "'backbone'," in log
    assert re.search(r'Iter\(train\) \[1/1\].*loss: \d', log)


#: Imported by every rank through PYTHONPATH: at exit, after the tool's
#: teardown, it writes the names of the process's native threads.
THREADS_AT_EXIT = """
import atexit
import os


def _threads_at_exit():
    names = []
    for task in os.listdir('/proc/self/task'):
        with open(f'/proc/self/task/{task}/comm') as f:
            names.append(f.read().strip())
    path = os.environ['THREADS_AT_EXIT'] + os.environ.get('RANK', '-')
    with open(path, 'w') as f:
        f.write(','.join(sorted(names)))


if 'THREADS_AT_EXIT' in os.environ:
    atexit.register(_threads_at_exit)
"""


def _gloo_threads_at_exit(prefix):
    """Each rank's gloo threads still alive at its exit."""
    left = {}
    for rank in (0, 1):
        with open(f'{prefix}{rank}') as f:
            left[rank] = [t for t in f.read().split(',') if 'gloo' in t]
    return left


def test_dist_train_and_test_two_gloo_processes(demo_data, tmp_path):
    """Two gloo ranks train and test through the launch scripts, and each
    ends clean: no gloo thread left at exit. A Runner keeps its DDP model
    (whose reducer holds the group) in reference cycles; left to the
    interpreter's exit, those threads' teardown aborted a rank now and then
    (``terminate called without an active exception``, SIGABRT, once in
    CI), which the exit code alone shows only by chance."""
    hook = tmp_path / 'hook'
    hook.mkdir()
    (hook / 'sitecustomize.py').write_text(THREADS_AT_EXIT)
    env = dict(PYTHON=sys.executable, PORT=str(free_port()),
               PYTHONPATH=os.pathsep.join(
                   [str(hook), os.environ.get('PYTHONPATH', '')]),
               THREADS_AT_EXIT=str(tmp_path / 'train_threads'))
    result = run('bash', 'tools/dist_train.sh', DEMO_CONFIG, '2', '--demo',
                 demo_data, '--demo-iters', '2', '--work-dir', str(tmp_path),
                 *NO_BASELINE_EVAL, env=env)
    log = result.stdout + result.stderr
    assert 'gloo process group of 2 processes' in log
    assert 'Distributed training: True' in log
    assert osp.isfile(tmp_path / 'iter_2.pth')
    # rank 0 gathered both ranks' predictions for the COCO evaluation
    assert re.search(r'coco/bbox_mAP: \d\.\d+', log)
    assert 'terminate called' not in log and 'exitcode: -6' not in log
    assert _gloo_threads_at_exit(env['THREADS_AT_EXIT']) == {0: [], 1: []}

    env.update(PORT=str(free_port()),
               THREADS_AT_EXIT=str(tmp_path / 'test_threads'))
    result = run('bash', 'tools/dist_test.sh', DEMO_CONFIG,
                 str(tmp_path / 'iter_2.pth'), '2', '--demo', demo_data,
                 '--work-dir', str(tmp_path / 'test'), '--cfg-options',
                 'test_dataloader.dataset.indices=4', env=env)
    log = result.stdout + result.stderr
    assert re.search(r'coco/segm_mAP: \d\.\d+', log)
    assert 'terminate called' not in log and 'exitcode: -6' not in log
    assert _gloo_threads_at_exit(env['THREADS_AT_EXIT']) == {0: [], 1: []}


def test_segmentation_train_and_test_through_tools(demo_data, tmp_path):
    run(sys.executable, 'tools/train.py', UPERNET_SWIN_T, '--demo', demo_data,
        '--demo-iters', '1', '--work-dir', str(tmp_path), '--cfg-options',
        'val_dataloader.dataset.indices=1')
    checkpoint = glob.glob(str(tmp_path / 'iter_1.pth'))[0]
    result = run(sys.executable, 'tools/test.py', UPERNET_SWIN_T, checkpoint,
                 '--demo', demo_data, '--work-dir', str(tmp_path),
                 '--cfg-options', 'test_dataloader.dataset.indices=2')
    assert re.search(r'mIoU: \d+\.\d+', result.stdout + result.stderr)


def _tool(name):
    """A tools/ script as a module (its functions, without running main)."""
    spec = importlib.util.spec_from_file_location(name, f'tools/{name}.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_train_py_demo_with_auto_scale_lr(demo_data, tmp_path, monkeypatch):
    """--demo keeps the recipe's auto_scale_lr: --auto-scale-lr scales the
    lr by the demo batch (2 images) over the recipe's 16."""
    from mmengine.runner import Runner
    train = _tool('train')
    monkeypatch.setattr(sys, 'argv', [
        'train.py', MASK_RCNN_FLATTEN_SWIN_T, '--demo', demo_data,
        '--auto-scale-lr', '--work-dir', str(tmp_path)])
    cfg = train.build_config(train.parse_args())
    assert cfg.auto_scale_lr == dict(enable=True, base_batch_size=16)
    runner = Runner.from_cfg(cfg)
    optim_wrapper = runner.build_optim_wrapper(cfg.optim_wrapper)
    runner.scale_lr(optim_wrapper, cfg.auto_scale_lr)
    lr = optim_wrapper.optimizer.param_groups[0]['lr']
    assert lr == pytest.approx(cfg.optim_wrapper.optimizer.lr * 2 / 16)


def test_test_py_flip_tta_for_classifiers(demo_data, tmp_path):
    """--tta without tta_model in the config: flip TTA averaging the two
    views' scores, as mmpretrain's test.py does."""
    from mmengine.runner import Runner

    from vitattn_tools.runtime import load_tool_config
    cfg = load_tool_config(VIT_TI, str(tmp_path),
                           {'test_dataloader.dataset.indices': 2}, demo_data)
    assert 'tta_model' not in cfg
    _tool('test').enable_tta(cfg, 'classification')
    runner = Runner.from_cfg(cfg)
    assert type(runner.model).__name__ == 'AverageClsScoreTTA'
    views = runner.test_dataloader.dataset[0]['inputs']
    assert len(views) == 2 and torch.equal(views[0].flip(-1), views[1])
    assert 'accuracy/top1' in runner.test()


@pytest.mark.slow
def test_compile_backbone_switch_trains_and_tests(demo_data, tmp_path):
    """``--compile-backbone``: the demo detector trains and evaluates with
    its FLatten-Swin backbone compiled (one dynamic-shape graph; the
    'eager' backend keeps the test to graph capture). The evaluation is
    tools/test.py's: the training run validates nothing (its own
    validation would trace the inference graph a second time)."""
    result = run(sys.executable, 'tools/train.py', DEMO_CONFIG, '--demo',
                 demo_data, '--demo-iters', '2', '--work-dir',
                 str(tmp_path), '--compile-backbone', 'eager',
                 *NO_BASELINE_EVAL, 'train_cfg.val_begin=3')
    log = result.stdout + result.stderr
    assert 'backbone compiled' in log
    assert 'Iter(train) [2/2]' in log and 'nan' not in log.split(
        'Iter(train) [2/2]')[1].split('\n')[0]
    checkpoint = str(tmp_path / 'iter_2.pth')
    result = run(sys.executable, 'tools/test.py', DEMO_CONFIG, checkpoint,
                 '--demo', demo_data, '--work-dir', str(tmp_path / 'test'),
                 '--compile-backbone', 'eager')
    log = result.stdout + result.stderr
    assert 'backbone compiled' in log and 'coco/bbox_mAP' in log


def test_describe_backbone_prints_each_stage_from_its_spec():
    """tools/describe_backbone.py: a model's stages as its ``spec()``
    describes them (widths, heads, grids, the attention of every block in
    runs, the drop-path slice, the least grid), its outputs, least input
    and parameters."""
    result = run(sys.executable, 'tools/describe_backbone.py', 'LaViT:small')
    rows = [line for line in result.stdout.splitlines()
            if re.match(r'\| \d \|', line)]
    assert len(rows) == 4
    assert '| 2 | 320 | 5 | 14x14 | 6 | 2 x VanillaAttention, 4 x ' \
        'LessAttention |' in rows[2]
    assert 'outputs: stages [0, 1, 2, 3]; inputs of at least 1x1 pixels' \
        in result.stdout
    assert 'LaViT: 22.10 M parameters' in result.stdout
    result = run(sys.executable, 'tools/describe_backbone.py',
                 '{"type": "AttnPVT", "arch": "tiny"}')
    assert '| 0 | 64 | 1 | 56x56 | 2 | 2 x SpatialReductionAttention |' \
        in result.stdout
    assert 'inputs of at least 32x32 pixels' in result.stdout


@pytest.mark.parametrize('arch', ['tiny', 'small', 'base'])
def test_a_converter_picks_the_arch_a_file_fills_from_descriptions(arch):
    """The official-file converters choose the zoo arch whose blocks and
    widths a file holds by the archs' descriptions (``spec()``), building
    none: Swin-T and -S differ in stage 3's blocks, -S and -B in widths."""
    from vitattn_mm.models.backbones import FLattenSwinTransformer
    from vitattn_tools.converter import arch_for
    with torch.device('meta'):
        state_dict = FLattenSwinTransformer(arch=arch).state_dict()
    spec = arch_for(FLattenSwinTransformer, state_dict)
    assert spec.arch == FLattenSwinTransformer.spec(arch=arch).arch
