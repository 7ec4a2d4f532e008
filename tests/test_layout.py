"""The library's layout, as the design asks of it: one place for each
thing, no import cycle, tools apart, every attention in a file of its
own."""
import ast
import os
import os.path as osp

from vitattn_mm.registry import ATTENTIONS
from vitattn_tools.imports import find_cycle, import_graph

#: A file a reader can hold in their head.
MAX_LINES = 500


def _py_files(root):
    return sorted(osp.join(d, f) for d, _, names in os.walk(root)
                  for f in names if f.endswith('.py'))


def test_no_import_cycle_in_the_library_or_the_tools():
    for package in ('vitattn_mm', 'tools/vitattn_tools'):
        graph = import_graph(package)
        assert len(graph) > 5
        assert find_cycle(graph) is None, (package, find_cycle(graph))


def test_the_library_imports_no_tool_and_no_task_model_at_module_level():
    """``import vitattn_mm`` builds backbones without mmdet's / mmseg's /
    mmpretrain's task models (whose import needs mmcv's compiled ops); the
    command-line helpers live in ``vitattn_tools``."""
    graph = import_graph('vitattn_mm')
    for module, deps in graph.items():
        assert 'vitattn_tools' not in deps, module
    for path in _py_files('vitattn_mm'):
        with open(path) as f:
            tree = ast.parse(f.read())
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith(
                    ('mmdet.models', 'mmseg.models')), (path, node.module)


def test_no_file_in_the_library_is_over_500_lines():
    sizes = {p: sum(1 for _ in open(p)) for p in _py_files('vitattn_mm')}
    assert {p: n for p, n in sizes.items() if n > MAX_LINES} == {}


def test_every_attention_has_a_file_of_its_own():
    """One registered attention per module under models/attentions; the
    Less-Attention pair (VA and LA layers, which only work together) is the
    one sub-package, its layers in one module beside its state,
    transforms, residual, plan and loss."""
    modules = {}
    for cls in set(ATTENTIONS.module_dict.values()):
        assert cls.__module__.startswith('vitattn_mm.models.attentions.'), cls
        modules.setdefault(cls.__module__, set()).add(cls.__name__)
    pair = 'vitattn_mm.models.attentions.less_attention.layers'
    assert modules.pop(pair) == {'VanillaAttention', 'LessAttention'}
    assert {m: c for m, c in modules.items() if len(c) > 1} == {}


def test_importing_the_library_loads_no_task_model():
    """In a fresh interpreter, ``import vitattn_mm`` loads none of
    mmdet's, mmseg's or mmpretrain's task models (not even through a
    package's ``__init__``, which the direct-import check above cannot
    see): a backbone builds where their import would fail."""
    import subprocess
    import sys
    probe = ('import sys, vitattn_mm; print(sorted(m for m in sys.modules '
             "if m.startswith(('mmdet.models', 'mmseg.models', "
             "'mmpretrain.models'))))")
    out = subprocess.run([sys.executable, '-c', probe], capture_output=True,
                         text=True, check=True, cwd='/').stdout
    assert out.strip() == '[]', out
