"""The installed stack is the pinned one, mmcv's compiled ops work, and the
plugin's models resolve from all three downstream registries."""
import importlib.metadata as metadata
import re

import pytest
import torch

import vitattn_mm  # noqa: F401

PINNED = {}
with open('requirements/runtime.txt') as f:
    for line in f:
        match = re.match(r'^([A-Za-z0-9_.-]+)==([^\s#]+)', line)
        if match:
            PINNED[match.group(1)] = match.group(2)


@pytest.mark.parametrize('package', sorted(PINNED))
def test_pinned_versions_installed(package):
    assert metadata.version(package).split('+')[0] == PINNED[package]


def test_mmcv_compiled_ops_run():
    from mmcv.ops import RoIAlign, nms
    assert metadata.version('mmcv') == '2.1.0'
    boxes = torch.tensor([[0., 0., 10., 10.], [1., 1., 10., 10.],
                          [20., 20., 30., 30.]])
    _, keep = nms(boxes, torch.tensor([0.9, 0.8, 0.7]), iou_threshold=0.5)
    assert keep.tolist() == [0, 2]
    feats = torch.arange(16.).view(1, 1, 4, 4)
    rois = torch.tensor([[0., 0., 0., 4., 4.]])
    out = RoIAlign((2, 2), spatial_scale=1.0, sampling_ratio=2)(feats, rois)
    assert out.shape == (1, 1, 2, 2)
    assert out.mean().item() == pytest.approx(feats.mean().item(), abs=0.5)


def test_backbones_resolve_in_every_scope():
    """Each package's registry gives that package's class of every exported
    backbone (``backbones.packages``: the plain class, or its subclass with
    the package's defaults where the stock classes disagree)."""
    from mmdet.registry import MODELS as DET
    from mmpretrain.registry import MODELS as CLS
    from mmseg.registry import MODELS as SEG
    from vitattn_mm.models import backbones
    from vitattn_mm.models.backbones import packages
    names = [n for n in dir(backbones) if n[0].isupper()]
    assert names, 'no backbone is exported'
    for registry in (DET, SEG, CLS):
        own = getattr(packages, registry.scope)
        for name in names:
            cls = registry.get(name)
            assert cls is getattr(own, name, None), (
                f'{name} missing from {registry.scope}')
            assert issubclass(cls, getattr(backbones, name)), name


#: Run in a fresh interpreter: mmcv's compiled ops made unimportable, as on
#: an mmcv built with MMCV_WITH_OPS=0 (or a wheel whose _ext does not match
#: the installed torch), then the package imported and every registered
#: backbone built tiny and run once. Prints one line per failure.
WITHOUT_COMPILED_OPS = '''
import sys
import traceback

BLOCKED = ('mmcv._ext', 'mmcv.ops')


class NoCompiledOps:
    """Finds nothing, but refuses mmcv's compiled ops and their
    submodules with the ImportError such an mmcv gives."""

    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + '.') for b in BLOCKED):
            raise ModuleNotFoundError(
                f'No module named {name!r} (mmcv without compiled ops)',
                name=name)
        return None


sys.meta_path.insert(0, NoCompiledOps())
sys.path.insert(0, 'tests')

import torch  # noqa: E402

import vitattn_mm  # noqa: E402,F401
from tiny_backbones import tiny_kwargs  # noqa: E402

leaked = [m for m in sys.modules if m.split('.')[:2] in (['mmcv', '_ext'],
                                                           ['mmcv', 'ops'])]
assert not leaked, leaked
names = sorted(n for n in dir(vitattn_mm.models.backbones) if n[0].isupper())
failures = []
for name in names:
    try:
        torch.manual_seed(0)
        model = getattr(vitattn_mm.models.backbones,
                        name)(**tiny_kwargs(name)).eval()
        with torch.no_grad():
            outs = model(torch.randn(1, 3, 64, 64))
        assert len(outs) > 0, 'no output'
    except Exception as error:  # collect them all, not the first only
        failures.append(f'{name}: {type(error).__name__}: {error}')
        traceback.print_exc()
print(f'{len(names) - len(failures)}/{len(names)} backbones built and ran '
      'without compiled mmcv ops')
for failure in failures:
    print('FAILED', failure)
sys.exit(1 if failures else 0)
'''


def test_import_and_build_without_compiled_mmcv_ops():
    """``import vitattn_mm`` and every backbone work with an mmcv that has
    no compiled ops: the library needs them nowhere (the detection heads
    of some configs do, and import them when a config builds them)."""
    import subprocess
    import sys
    result = subprocess.run([sys.executable, '-c', WITHOUT_COMPILED_OPS],
                            capture_output=True, text=True)
    status, out, err = result.returncode, result.stdout, result.stderr
    assert status == 0, (f'exit status {status}\n--- stdout\n{out}'
                         f'\n--- stderr (last 6000 characters)\n'
                         f'{err[-6000:]}')
