"""Write docs/recipes.md: every shipped config's training recipe and the
source of each value (see tools/vitattn_tools/recipes.py).

Examples::

    python tools/recipe_table.py            # regenerate docs/recipes.md
    python tools/recipe_table.py --check    # exit 1 if it is out of date
"""
import argparse
import difflib
import glob
import sys

from vitattn_tools.recipes import read_recipe, render_recipes

COMMAND = 'python tools/recipe_table.py'
TABLE = 'docs/recipes.md'


def shipped_configs():
    """Every config a user trains: all but ``_base_`` fragments and the
    demo config."""
    return sorted(
        path for path in glob.glob('configs/**/*.py', recursive=True)
        if '/_base_/' not in path and not path.startswith('configs/demo/'))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--check', action='store_true',
                        help='compare with docs/recipes.md, write nothing')
    parser.add_argument('--out', default=TABLE)
    args = parser.parse_args(argv)
    recipes = [read_recipe(path) for path in shipped_configs()]
    problems = [f'{r.config}: no source for {", ".join(r.unsourced())}'
                for r in recipes if r.unsourced()]
    problems += [f'{r.config}: malformed recipe_sources '
                 f'{", ".join(r.malformed_sources())}'
                 for r in recipes if r.malformed_sources()]
    text = render_recipes(recipes, COMMAND) + '\n'
    if args.check:
        with open(args.out) as f:
            current = f.read()
        diff = list(difflib.unified_diff(current.splitlines(),
                                         text.splitlines(), args.out,
                                         'configs', lineterm='', n=0))
        print('\n'.join(problems + diff) or f'{args.out} is up to date')
        return 1 if diff or problems else 0
    with open(args.out, 'w') as f:
        f.write(text)
    print('\n'.join(problems))
    print(f'wrote {args.out}: {len(recipes)} configs, '
          f'{len(problems)} with problems')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
