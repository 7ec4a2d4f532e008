"""Print the import graph of a package's modules and say whether it has a
cycle (module-level imports only; see :mod:`vitattn_tools.imports`).

Examples::

    python tools/import_graph.py                  # vitattn_mm, as text
    python tools/import_graph.py --format mermaid > graph.md
    python tools/import_graph.py --package tools/vitattn_tools
    python tools/import_graph.py --check          # exit 1 on a cycle
"""
import argparse
import os.path as osp
import sys

from vitattn_tools.imports import find_cycle, import_graph, render


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--package', default='vitattn_mm',
                        help='package directory (default: vitattn_mm)')
    parser.add_argument('--format', choices=('text', 'mermaid'),
                        default='text')
    parser.add_argument('--check', action='store_true',
                        help='print only the verdict; exit 1 on a cycle')
    args = parser.parse_args(argv)
    graph = import_graph(osp.normpath(args.package))
    cycle = find_cycle(graph)
    if not args.check:
        print(render(graph, args.format))
    edges = sum(len(deps & set(graph)) for deps in graph.values())
    print(f'{len(graph)} modules, {edges} imports between them: '
          + ('cycle ' + ' -> '.join(cycle) if cycle else 'no cycle'),
          file=sys.stderr if not args.check else sys.stdout)
    return 1 if cycle else 0


if __name__ == '__main__':
    sys.exit(main())
