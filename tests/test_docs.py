"""The design notes and the guide name what exists: every path they cite
is a file or folder of the checkout, every name of ours they cite is
defined, and a ``Class.attribute`` is that class's attribute."""
import ast
import fnmatch
import importlib
import inspect
import itertools
import os
import os.path as osp
import re

import pytest

import vitattn_mm

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
DOCS = ['docs/design.md', 'docs/adding_an_attention.md',
        'docs/adding_a_skeleton.md',
        'docs/fused_attention.md']
#: Where a relative path in the docs may start.
BASES = ['', 'vitattn_mm', 'vitattn_mm/models', 'vitattn_mm/models/attentions',
         'tools']
#: Backticked names that are not ours: packages, the stock classes and
#: config keys of OpenMMLab, aten ops, timm's converter.
EXTERNAL = {'torch', 'mmcv', 'cnn', 'mmdet', 'mmseg', 'mmpretrain',
            'mmengine', 'F', 'triton', 'onnx', 'PyramidVisionTransformer',
            'custom_imports', 'resume', 'checkpoint_filter_fn', '_to_copy',
            'select', 'vitattn_tools', 'num_warps', 'ptxas', 'sm_90'}


def _sources():
    for folder in ('vitattn_mm', 'tools/vitattn_tools', 'tests',
                   'benchmarks'):
        for directory, _, files in os.walk(osp.join(ROOT, folder)):
            for name in files:
                if name.endswith('.py'):
                    yield osp.join(directory, name)


def _defined_names():
    """Every identifier the library and the tools define or take."""
    names = set()
    for path in _sources():
        with open(path) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.keyword) and node.arg:
                names.add(node.arg)
            elif isinstance(node, ast.Constant) and isinstance(
                    node.value, str) and node.value.isidentifier():
                names.add(node.value)  # registered names, dict keys
    return names


def _our_classes():
    classes = {}
    for path in _sources():
        if '/vitattn_mm/' not in path or osp.basename(path).startswith(
                'triton_'):  # kernels: imported where triton is
            continue
        module = osp.relpath(path, ROOT)[:-3].replace('/', '.')
        module = module[:-len('.__init__')] if module.endswith(
            '__init__') else module
        for name, obj in vars(importlib.import_module(module)).items():
            if inspect.isclass(obj) and obj.__module__.startswith(
                    'vitattn_mm'):
                classes.setdefault(name, obj)
    return classes


def _tokens(doc):
    with open(osp.join(ROOT, doc)) as f:
        text = f.read()
    return sorted(set(re.findall(r'`([^`\n]+)`', text)))


def _expand(token):
    """``models/backbones/{a,b}.py`` -> both paths."""
    match = re.search(r'\{([^}]*)\}', token)
    if not match:
        return [token]
    return list(itertools.chain.from_iterable(
        _expand(token[:match.start()] + part + token[match.end():])
        for part in match.group(1).split(',')))


def _resolves(path):
    return any(osp.exists(osp.join(ROOT, base, path.rstrip('/')))
               for base in BASES)


@pytest.mark.parametrize('doc', DOCS)
def test_every_path_the_docs_cite_exists(doc):
    missing = []
    for token in _tokens(doc):
        if '/' not in token or ' ' in token or '://' in token:
            continue
        for path in _expand(token):
            head, _, attr = path.rpartition('.')
            if not path.endswith(('.py', '.md', '/')) and '/' in head \
                    and attr.isidentifier():
                # models/checkpoint/pretrained.load_pretrained: an attribute
                module = importlib.import_module(
                    'vitattn_mm.' + head.replace('/', '.'))
                if not hasattr(module, attr):
                    missing.append(path)
            elif not _resolves(path):
                missing.append(path)
    assert missing == []


@pytest.mark.parametrize('doc', DOCS)
def test_every_name_the_docs_cite_is_defined(doc):
    defined = _defined_names()
    classes = _our_classes()
    files = {name for path in _sources() for name in [osp.basename(path)]}
    unknown = []
    for token in _tokens(doc):
        if token.endswith('.py') and '/' not in token:
            if not fnmatch.filter(files, token):
                unknown.append(token)
            continue
        name = re.sub(r'\(.*\)$', '', token)
        if not re.fullmatch(r'[A-Za-z_]\w*(\.\w+)*', name):
            continue
        first, *rest = name.split('.')
        if first in EXTERNAL or first in dir(vitattn_mm):
            continue
        if first in classes and rest:
            if not hasattr(classes[first], rest[0]):
                unknown.append(token)
        elif first not in defined:
            unknown.append(token)
    assert unknown == []
