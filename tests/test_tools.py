"""The command-line tools end to end, as a user runs them."""
import glob
import os
import os.path as osp
import re
import socket
import subprocess
import sys

import pytest
import torch

from vitattn_mm.utils.checkpoint import UnsafeCheckpointError  # noqa: F401

pytestmark = pytest.mark.slow

DEMO_CONFIG = 'configs/demo/mask-rcnn_flatten-swin-nano_fpn_8e_demo.py'
# Smoke runs: skip the demo config's untrained-model evaluation and
# validate on 4 images only.
NO_BASELINE_EVAL = ('--cfg-options', 'custom_hooks=[]',
                    'val_dataloader.dataset.indices=4')
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


def test_train_py_amp_on_cpu_uses_bf16_autocast(demo_data, tmp_path):
    result = run(sys.executable, 'tools/train.py', DEMO_CONFIG, '--demo',
                 demo_data, '--demo-iters', '1', '--amp', '--work-dir',
                 str(tmp_path), *NO_BASELINE_EVAL)
    log = result.stdout + result.stderr
    assert "type='AutocastOptimWrapper'" in log
    assert "modules=(\n" in log or "'backbone'," in log
    assert re.search(r'Iter\(train\) \[1/1\].*loss: \d', log)


def test_dist_train_two_gloo_processes(demo_data, tmp_path):
    env = dict(PYTHON=sys.executable, PORT=str(free_port()))
    result = run('bash', 'tools/dist_train.sh', DEMO_CONFIG, '2', '--demo',
                 demo_data, '--demo-iters', '2', '--work-dir', str(tmp_path),
                 *NO_BASELINE_EVAL, env=env)
    log = result.stdout + result.stderr
    assert 'gloo process group of 2 processes' in log
    assert 'Distributed training: True' in log
    assert osp.isfile(tmp_path / 'iter_2.pth')
    # rank 0 gathered both ranks' predictions for the COCO evaluation
    assert re.search(r'coco/bbox_mAP: \d\.\d+', log)


def test_segmentation_train_and_test_through_tools(demo_data, tmp_path):
    run(sys.executable, 'tools/train.py', UPERNET_SWIN_T, '--demo', demo_data,
        '--demo-iters', '1', '--work-dir', str(tmp_path), '--cfg-options',
        'val_dataloader.dataset.indices=1')
    checkpoint = glob.glob(str(tmp_path / 'iter_1.pth'))[0]
    result = run(sys.executable, 'tools/test.py', UPERNET_SWIN_T, checkpoint,
                 '--demo', demo_data, '--work-dir', str(tmp_path),
                 '--cfg-options', 'test_dataloader.dataset.indices=2')
    assert re.search(r'mIoU: \d+\.\d+', result.stdout + result.stderr)
