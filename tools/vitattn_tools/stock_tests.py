"""mmseg's own backbone tests, run unchanged against this package's classes.

mmsegmentation's published sdist ships ``tests/test_models/test_backbones``.
``tools/setup_env.sh`` fetches that sdist (pinned, hash-checked) and keeps
the files listed in :data:`STOCK_TEST_FILES` under the environment's
``share/vitattn_mm/stock_tests``. :func:`run_file` loads one of them as a
module, puts a project class where the file names mmseg's class (the only
change), and calls each ``test_*`` function:

* **passed**: it returned;
* **failed**: it raised (the first failing line of the file is reported);
* **not applicable**: it never names the substituted class (it tests one of
  mmseg's blocks), or :data:`NOT_APPLICABLE` gives a reason.

``python tools/run_stock_tests.py`` prints the table; ``tests/
test_stock_tests.py`` holds every outcome to the documented one.
"""
import importlib.util
import os.path as osp
import sys
import traceback
import types
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import torch

#: The mmseg release whose tests run (the installed one).
MMSEG_SDIST = 'mmsegmentation-1.2.2'
#: Test file -> the stock class it tests (the name substituted).
STOCK_TEST_FILES = {
    'test_swin.py': 'SwinTransformer',
    'test_vit.py': 'VisionTransformer',
}
#: Stock class -> the skeleton whose classes (it and its families) stand in
#: for it.
SKELETON_OF = {
    'SwinTransformer': 'AttnSwinTransformer',
    'VisionTransformer': 'AttnViT',
}
#: (file, function, class) -> why the function does not apply to the class.
NOT_APPLICABLE: Dict[Tuple[str, str, str], str] = {}
#: (file, function, class) -> why the class fails that stock check: a
#: documented family property, not a gap (tests/test_stock_tests.py checks
#: each reason).
PAPER_SIZE = ("mmseg's ViT defaults to ViT-B (768 wide), the family to its "
              "paper's size (line 66 expects 768 channels)")
NO_CLS_TOKEN = ("; at arch='b' only line 117 fails: it asks for a class "
                'token (with_cls_token=True), which an attention working on '
                'the token grid cannot take')
KNOWN_FAILURES = {
    ('test_vit.py', 'test_vit_backbone', 'MSFViT'):
    PAPER_SIZE + "; at arch='b' it passes",
    ('test_vit.py', 'test_vit_backbone', 'FLattenDeiT'):
    PAPER_SIZE + NO_CLS_TOKEN,
    ('test_vit.py', 'test_vit_backbone', 'LessAttnViT'):
    PAPER_SIZE + NO_CLS_TOKEN,
}


def stock_tests_dir() -> str:
    """Where ``tools/setup_env.sh`` put mmseg's backbone tests."""
    return osp.join(sys.prefix, 'share', 'vitattn_mm', 'stock_tests',
                    MMSEG_SDIST, 'tests', 'test_models', 'test_backbones')


@dataclass
class Outcome:
    """What one stock test function did with one class."""
    function: str
    status: str  # 'passed', 'failed' or 'n/a'
    detail: str = ''


def classes_for(stock_name: str) -> List[type]:
    """mmseg's classes of every project backbone standing in for
    ``stock_name``: the skeleton and each family built on it."""
    from mmseg.registry import MODELS

    from vitattn_mm.models import backbones  # registers them
    skeleton = getattr(backbones, SKELETON_OF[stock_name])
    names = sorted(
        n for n in dir(backbones) if n[0].isupper()
        and isinstance(getattr(backbones, n), type)
        and issubclass(getattr(backbones, n), skeleton))
    return [MODELS.get(n) for n in names]


def load_module(filename: str, directory: Optional[str] = None
                ) -> types.ModuleType:
    """A fresh copy of stock test file ``filename`` as a module of a
    private package (its ``from .utils import ...`` resolves there)."""
    directory = directory or stock_tests_dir()
    path = osp.join(directory, filename)
    if not osp.isfile(path):
        raise FileNotFoundError(
            f'{path} is missing: run tools/setup_env.sh, which fetches '
            f"mmseg's tests from the {MMSEG_SDIST} sdist")
    package = '_vitattn_stock_tests'
    if package not in sys.modules:
        module = types.ModuleType(package)
        module.__path__ = [directory]
        sys.modules[package] = module
    name = f'{package}.{filename[:-3]}'
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _failure(error: BaseException, path: str) -> str:
    """The error and the last line of the stock file it went through."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if osp.samefile(f.filename, path)] if osp.exists(path) else []
    where = f'line {frames[-1].lineno}: {frames[-1].line}; ' if frames else ''
    message = str(error).strip().splitlines()
    text = type(error).__name__ + (f': {message[0]}' if message else '')
    return where + text[:160]


def run_file(filename: str, cls: type,
             directory: Optional[str] = None) -> List[Outcome]:
    """Every ``test_*`` function of stock file ``filename`` with ``cls``
    in place of the class the file tests."""
    stock_name = STOCK_TEST_FILES[filename]
    module = load_module(filename, directory)
    setattr(module, stock_name, cls)
    outcomes = []
    for name in sorted(n for n in vars(module) if n.startswith('test_')):
        func = getattr(module, name)
        reason = NOT_APPLICABLE.get((filename, name, cls.__name__))
        if stock_name not in func.__code__.co_names:
            reason = f'tests mmseg\'s blocks only; never builds {stock_name}'
        if reason:
            outcomes.append(Outcome(name, 'n/a', reason))
            continue
        torch.manual_seed(0)
        try:
            func()
        except Exception as error:  # a failing stock check, reported
            outcomes.append(
                Outcome(name, 'failed', _failure(error, module.__file__)))
        else:
            outcomes.append(Outcome(name, 'passed'))
    return outcomes


def run_all(directory: Optional[str] = None
            ) -> Dict[Tuple[str, str], List[Outcome]]:
    """``{(file, class name): outcomes}`` for every file and class."""
    results = {}
    for filename, stock_name in STOCK_TEST_FILES.items():
        for cls in classes_for(stock_name):
            results[filename, cls.__name__] = run_file(
                filename, cls, directory)
    return results


def render(results: Dict[Tuple[str, str], List[Outcome]]) -> str:
    """A Markdown table (file, class, passed / failed / n/a) and each
    failure and not-applicable case with its detail."""
    lines = ['| mmseg test file | class | passed | failed | n/a |',
             '|---|---|---|---|---|']
    notes = []
    for (filename, name), outcomes in results.items():
        counts = {s: sum(o.status == s for o in outcomes)
                  for s in ('passed', 'failed', 'n/a')}
        lines.append(f'| {filename} | `{name}` | {counts["passed"]} | '
                     f'{counts["failed"]} | {counts["n/a"]} |')
        notes += [f'* `{filename}::{o.function}` with `{name}`: '
                  f'{o.status}, {o.detail}' + (
                      f'. Why: {KNOWN_FAILURES[filename, o.function, name]}.'
                      if (filename, o.function, name) in KNOWN_FAILURES
                      else '') for o in outcomes if o.status != 'passed']
    return '\n'.join(lines + [''] + notes) + '\n'
