"""OpenMMLab's own configs with only ``model.backbone.type`` changed: does
each of this package's backbones of that architecture build, and run?

Examples::

    # the whole table (stock Swin, PVT, PVTv2, ViT/DeiT configs of the
    # installed mmdet, mmseg and mmpretrain x every backbone of that arch)
    python tools/check_drop_in.py
    # write it as Markdown
    python tools/check_drop_in.py --out drop_in.md

A family that cannot honour a keyword's value (e.g. a class token for an
attention that works on the token grid) refuses it by name; that cell is
listed as a refusal. Exits non-zero if any cell fails otherwise, and prints
the error of each.
"""
import argparse
import sys

import vitattn_mm  # noqa: F401  (registers backbones)
from vitattn_tools.drop_in import check_all, render


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Stock OpenMMLab configs with only the backbone type '
        'changed: build, forward (224x224, 225x353), params')
    parser.add_argument('--out', help='also write the Markdown table here')
    parser.add_argument('--no-stock', action='store_true',
                        help="leave out the stock backbone's own rows")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    cells = check_all(with_stock=not args.no_stock)
    table = render(cells)
    print(table)
    if args.out:
        with open(args.out, 'w') as f:
            f.write(table + '\n')
    refused = [c for c in cells if c.refusal]
    failed = [c for c in cells if not c.ok and not c.refusal]
    for cell in failed:
        print(f'FAILED {cell.config} with {cell.backbone}: '
              f'{cell.error or cell.shapes}', file=sys.stderr)
    print(f'{len(cells) - len(failed) - len(refused)}/{len(cells)} cells '
          f'work, {len(refused)} refuse a keyword value by name, '
          f'{len(failed)} fail ({sum(c.seconds for c in cells):.0f} s)')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
