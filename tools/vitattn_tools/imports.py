"""The import graph of a package's modules, and its cycles
(``tools/import_graph.py``).

Only module-level imports count (an import inside a function runs when it
is called, which is how the library keeps task models lazy). Relative
imports are resolved; imports of other packages are kept as their
top-level names.
"""
import ast
import os
import os.path as osp
from typing import Dict, List, Optional, Set


def module_name(path: str, root: str) -> str:
    """``root/a/b.py`` -> ``pkg.a.b`` (``__init__`` -> the package)."""
    rel = osp.relpath(path, osp.dirname(root))[:-3].replace(os.sep, '.')
    return rel[:-len('.__init__')] if rel.endswith('.__init__') else rel


def _resolve(current: str, is_package: bool, node: ast.ImportFrom,
             modules: Set[str]) -> List[str]:
    """The modules an ``import from`` imports: each name that is a module
    of its own, else the module the names come from."""
    base = current if is_package else current.rsplit('.', 1)[0]
    for _ in range(node.level - 1):
        base = base.rsplit('.', 1)[0]
    target = node.module if node.level == 0 else (
        f'{base}.{node.module}' if node.module else base)
    submodules = [f'{target}.{alias.name}' for alias in node.names]
    if all(m in modules for m in submodules):
        return submodules
    return [target] + [m for m in submodules if m in modules]


def import_graph(root: str) -> Dict[str, Set[str]]:
    """``{module: modules it imports at module level}`` for every module
    under the package directory ``root`` (other packages included as
    their top-level names)."""
    files = [osp.join(d, f) for d, _, names in os.walk(root) for f in names
             if f.endswith('.py')]
    modules = {module_name(f, root): f for f in files}
    graph = {}
    for name, path in sorted(modules.items()):
        with open(path, encoding='utf-8') as f:
            tree = ast.parse(f.read(), path)
        is_package = path.endswith('__init__.py')
        deps = set()
        for node in tree.body:  # module level only
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                targets = _resolve(name, is_package, node, set(modules))
            else:
                continue
            for target in targets:
                if target in modules:
                    deps.add(target)
                elif not target.startswith(name.split('.')[0] + '.'):
                    deps.add(target.split('.')[0])
        deps.discard(name)
        graph[name] = deps
    return graph


def find_cycle(graph: Dict[str, Set[str]]) -> Optional[List[str]]:
    """One cycle among the package's own modules, or None."""
    state: Dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node, path):
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if dep not in graph:
                continue
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state:
                cycle = visit(dep, path + [dep])
                if cycle:
                    return cycle
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node, [node])
            if cycle:
                return cycle
    return None


def render(graph: Dict[str, Set[str]], fmt: str) -> str:
    own = set(graph)
    if fmt == 'mermaid':
        lines = ['```mermaid', 'graph LR']
        for name, deps in graph.items():
            for dep in sorted(deps & own):
                lines.append(f'  {name.replace(".", "_")}["{name}"] --> '
                             f'{dep.replace(".", "_")}["{dep}"]')
        return '\n'.join(lines + ['```'])
    lines = []
    for name, deps in graph.items():
        inner, outer = sorted(deps & own), sorted(deps - own)
        lines.append(f'{name}')
        lines += [f'  -> {dep}' for dep in inner]
        if outer:
            lines.append(f'  (outside: {", ".join(outer)})')
    return '\n'.join(lines)
