"""Shared fixtures: the demo data and a one-call recipe smoke run."""
import math
import os
import os.path as osp

# No GPU here: the fused ops' Triton kernels run in Triton's interpreter
# (tests/test_kernels.py). Set before anything imports triton (torch may,
# for ops of its own), since triton reads it when kernels are defined.
os.environ.setdefault('TRITON_INTERPRET', '1')

import pytest  # noqa: E402
import torch  # noqa: E402

REPO_ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))


def pytest_configure(config):
    # Two cores on CI: keep intra-op threads bounded and results repeatable;
    # under pytest-xdist each worker takes its share of the cores (threads
    # beyond the cores make torch's pools spin against each other).
    workers = int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', 1))
    threads = max(1, min(2, os.cpu_count() or 1) // workers)
    torch.set_num_threads(threads)
    # The tools the tests launch (tools/train.py, torchrun, ...) too.
    os.environ['OMP_NUM_THREADS'] = str(threads)
    os.chdir(REPO_ROOT)
    _memoize_stock_config_index()


def _memoize_stock_config_index():
    """Look up ``mmdet::`` / ``mmseg::`` / ``mmpretrain::`` bases from a
    cache: the same answers, at a third of the cost of every
    ``Config.fromfile`` of our configs.

    For each such base mmengine checks that the package is installed by
    reloading ``pkg_resources`` (a scan of site-packages), and to resolve a
    model config it reads the package's ``.mim/model-index.yml`` and every
    metafile listed there (about 80 YAML files). Neither can change while
    the tests run; the lookups themselves stay mmengine's.
    """
    from mmengine.config import config, utils
    if getattr(utils.load, 'memoized', False):
        return
    read, is_installed = utils.load, config.is_installed
    files, installed = {}, set()

    def load(path, *args, **kwargs):
        # Only _get_cfg_metainfo reads through it, and only reads the result.
        if args or kwargs:
            return read(path, *args, **kwargs)
        if path not in files:
            files[path] = read(path)
        return files[path]

    def cached_is_installed(package):
        if package not in installed and is_installed(package):
            installed.add(package)  # not a missing one: it may be installed
        return package in installed

    load.memoized = True
    utils.load = load
    config.is_installed = cached_is_installed


@pytest.fixture(autouse=True)
def isolated_default_scope():
    """Start every test with no default scope (a registry then builds from
    itself) and undo what the test set (``init_default_scope``, runners),
    so no test builds from a registry an earlier one left current."""
    from mmengine.registry import DefaultScope
    saved = DefaultScope._instance_dict.copy()
    DefaultScope._instance_dict.clear()
    yield
    DefaultScope._instance_dict.clear()
    DefaultScope._instance_dict.update(saved)


@pytest.fixture
def dp_loss_calls(monkeypatch):
    """``(logits, query_hw, key_hw, probs)`` of every bounded DP loss the
    LA maps of a training pass compute (``probs``: the map the layer
    handed over, or None), recorded as the state computes them."""
    from vitattn_mm.models.attentions.less_attention import state
    calls = []
    mean_loss = state.mean_diagonality_preserving_loss

    def spy(maps):
        calls.extend((logits, query_hw, key_hw, probs)
                     for logits, query_hw, key_hw, _, _, probs in maps)
        return mean_loss(maps)

    monkeypatch.setattr(state, 'mean_diagonality_preserving_loss', spy)
    return calls


@pytest.fixture(scope='session')
def demo_data(tmp_path_factory):
    """Root of freshly generated demo datasets (coco/, ade20k/, imagenet/)."""
    from vitattn_mm.datasets import generate_demo_data
    root = str(tmp_path_factory.mktemp('demo_data'))
    generate_demo_data(root)
    return root


@pytest.fixture
def run_recipe(demo_data, tmp_path):
    """Train a config for a few iterations on demo data, then test it.

    A smoke run trains one iteration on one image (the recipe's code paths,
    at the least compute; two for a segmentor, whose pyramid pooling
    normalises 1x1 maps over the batch); a run whose loss must fall asks
    for more of both. Returns ``(runner, train_losses, test_metrics)``;
    asserts every logged training loss is finite.
    """
    from mmengine.config import Config
    from mmengine.runner import Runner

    import vitattn_mm  # noqa: F401
    from config_cases import fresh_config
    from vitattn_tools.demo_config import make_demo_config
    from vitattn_tools.runtime import adapt_to_device, task_of

    def run(config, max_iters=1, batch_size=None, num_val=2, **overrides):
        # A path is read once per session (config_cases), then copied.
        cfg = fresh_config(config) if isinstance(config, str) else config
        # As tools/train.py: an fp16 recipe (AmpOptimWrapper) runs with bf16
        # autocast where there is no CUDA.
        adapt_to_device(cfg)
        if batch_size is None:
            batch_size = 2 if task_of(cfg) == 'segmentation' else 1
        cfg = make_demo_config(cfg, data_root=demo_data, max_iters=max_iters,
                               batch_size=batch_size, num_val=num_val)
        cfg.merge_from_dict(overrides)
        # The Runner prints and saves the config four times, each formatted
        # by yapf: seconds for a detector config. (Config.fromfile of
        # mmengine 0.10.7 ignores its format_python_code=False.)
        cfg = Config(cfg.to_dict(), cfg_text=cfg.text, filename=cfg.filename,
                     format_python_code=False)
        cfg.work_dir = str(tmp_path / 'work_dir')
        runner = Runner.from_cfg(cfg)
        runner.train()
        scalars = runner.message_hub.log_scalars
        losses = {k: v.current() for k, v in scalars.items()
                  if k.startswith('train/') and 'loss' in k}
        assert losses, 'no training loss was logged'
        assert all(math.isfinite(v) for v in losses.values()), losses
        metrics = runner.test()
        return runner, losses, metrics

    return run
