"""mmseg's own Swin and ViT backbone tests, run unchanged against every
project class of the architecture, with only the class substituted.

Examples::

    python tools/run_stock_tests.py               # the table, on stdout
    python tools/run_stock_tests.py --out t.md    # also written as Markdown

The tests come from the mmsegmentation sdist that ``tools/setup_env.sh``
fetches (see :mod:`vitattn_tools.stock_tests`).
"""
import argparse

from vitattn_tools.stock_tests import render, run_all


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="mmseg's test_swin.py and test_vit.py against every "
        'project class of the architecture')
    parser.add_argument('--out', help='also write the Markdown table here')
    parser.add_argument('--dir', help="mmseg's tests/test_models/"
                        'test_backbones (default: the environment\'s copy)')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    table = render(run_all(args.dir))
    print(table, end='')
    if args.out:
        with open(args.out, 'w') as f:
            f.write(table)


if __name__ == '__main__':
    main()
