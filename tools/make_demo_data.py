"""Write the embedded demo datasets (COCO instances, ADE20K layout,
class-per-folder classification) under a folder; deterministic, no download.

    python tools/make_demo_data.py [--root data/demo] [--seed 0] [--force]
"""
import argparse

from vitattn_mm.datasets import generate_demo_data


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--root', default='data/demo')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--num-train', type=int, default=200)
    parser.add_argument('--num-val', type=int, default=50)
    parser.add_argument('--force', action='store_true',
                        help='regenerate even if the data is there')
    args = parser.parse_args()
    paths = generate_demo_data(args.root, seed=args.seed,
                               num_train=args.num_train,
                               num_val=args.num_val, force=args.force)
    for name, path in paths.items():
        print(f'{name:<9} {path}')


if __name__ == '__main__':
    main()
