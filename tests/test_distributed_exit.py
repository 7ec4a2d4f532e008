"""Distributed runs end cleanly: every entry point that can start a process
group tears it down before it returns, on success and on error."""
import glob
import importlib.util
import os
import os.path as osp
import socket
import subprocess
import sys
import time

import pytest
import torch.distributed as dist

from vitattn_tools.runtime import end_process_group, ends_process_group

#: A two-rank job: rank ``FAIL`` raises after a collective (-1: none does)
#: while the other waits at a barrier the failing rank never reaches.
TWO_RANK_JOB = '''
import sys
import torch
import torch.distributed as dist
from vitattn_tools.runtime import ends_process_group


@ends_process_group
def main(fail_rank):
    dist.init_process_group('gloo')
    value = torch.ones(1)
    dist.all_reduce(value)
    if dist.get_rank() == fail_rank:
        raise RuntimeError('rank %d failed' % fail_rank)
    if fail_rank >= 0:
        dist.barrier()
    with open(sys.argv[2] + str(dist.get_rank()), 'w') as f:
        f.write(str(float(value)))


main(int(sys.argv[1]))
'''


def _free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def _one_rank_group():
    dist.init_process_group('gloo', init_method='tcp://127.0.0.1:'
                            f'{_free_port()}', rank=0, world_size=1)
    assert dist.is_initialized()


def _entry_points():
    """Every tool that builds an mmengine Runner or a process group (the
    scripts; not their helper package, tools/vitattn_tools/)."""
    for path in sorted(glob.glob('tools/**/*.py', recursive=True)):
        if path.startswith('tools/vitattn_tools/'):
            continue
        with open(path) as f:
            source = f.read()
        if 'Runner' in source or 'setup_launcher' in source:
            yield path


@pytest.mark.parametrize('path', list(_entry_points()))
def test_every_entry_point_ends_its_process_group(path):
    spec = importlib.util.spec_from_file_location(
        osp.splitext(osp.basename(path))[0], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert getattr(module.main, 'ends_process_group', False), (
        f'{path}: decorate main() with '
        'vitattn_tools.runtime.ends_process_group')


def test_entry_points_cover_the_launchers():
    assert {'tools/train.py', 'tools/test.py', 'tools/demo.py'} <= set(
        _entry_points())


def test_the_group_is_destroyed_on_success_and_on_error():
    calls = []

    @ends_process_group
    def succeed():
        _one_rank_group()
        calls.append('ran')
        return 7

    assert succeed() == 7 and calls == ['ran']
    assert not dist.is_initialized()

    @ends_process_group
    def fail():
        _one_rank_group()
        raise KeyError('boom')

    with pytest.raises(KeyError, match='boom'):
        fail()
    assert not dist.is_initialized()
    end_process_group()  # without a group: nothing to do


def _torchrun(script, fail_rank, tmp_path):
    path = tmp_path / 'job.py'
    path.write_text(script)
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node=2',
         f'--master_port={_free_port()}', str(path), str(fail_rank),
         str(tmp_path / 'rank')],
        capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONPATH=os.getcwd()))
    return result, time.monotonic() - start


@pytest.mark.slow
def test_two_ranks_exit_zero_without_abort(tmp_path):
    result, _ = _torchrun(TWO_RANK_JOB, -1, tmp_path)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log
    assert [(tmp_path / f'rank{i}').read_text() for i in (0, 1)] == [
        '2.0', '2.0']
    assert 'terminate called' not in log and 'SIGABRT' not in log


@pytest.mark.slow
def test_an_error_on_one_rank_ends_the_job_quickly(tmp_path):
    """The other rank waits at a barrier that never completes: the job
    still ends at once (no teardown barrier after an error) and fails."""
    result, seconds = _torchrun(TWO_RANK_JOB, 1, tmp_path)
    log = result.stdout + result.stderr
    assert result.returncode != 0
    assert 'rank 1 failed' in log
    # Imports take most of it; a hang would be gloo's 30-minute timeout.
    assert seconds < 120, seconds
