"""What the config and recipe tests share: the config lists, each config read
once per session, and one assertion that checks many configs.

A config check is a function of one path; :func:`check_each` runs it over
every config and fails once, naming each config that failed with its error,
so one pytest item covers a whole family without stopping at the first bad
config.
"""
import copy
import glob
import re
import traceback
from typing import Callable, Iterable, List

from mmengine.config import Config

from vitattn_tools.recipes import load_config

#: Every config file but the ``_base_`` fragments (demo configs included).
ALL_CONFIGS = sorted(
    path for path in glob.glob('configs/**/*.py', recursive=True)
    if '/_base_/' not in path)


def family(name: str) -> List[str]:
    """The configs of ``configs/<name>/``."""
    return sorted(glob.glob(f'configs/{name}/*.py'))


def cached_config(path: str) -> Config:
    """The resolved config at ``path``, read once per session (the cache
    :mod:`vitattn_tools.recipes` reads the recipe table with). Shared:
    read it, never change it; :func:`fresh_config` gives a copy to edit."""
    return load_config(path)


def fresh_config(path: str) -> Config:
    """A private copy of :func:`cached_config` ``(path)``: building a model
    or a dataset from it may change it."""
    return copy.deepcopy(load_config(path))


def _describe(case: str, error: BaseException) -> str:
    if isinstance(error, AssertionError):
        # pytest's rewritten message already shows the values compared;
        # its lines indented under the case they belong to.
        return f'{case}: ' + str(error).replace('\n', '\n    ')
    # Where it failed, not the whole stack: one line per config.
    frame = traceback.extract_tb(error.__traceback__)[-1]
    return (f'{case}: {type(error).__name__}: {error} '
            f'({frame.filename}:{frame.lineno})')


def check_each(cases: Iterable[str], check: Callable[[str], None]) -> None:
    """Run ``check(case)`` for every case; fail once, listing every case
    whose check raised (assertion or error) with its message.

    Args:
        cases (Iterable[str]): Usually config paths.
        check (callable): Raises for a bad case; its return value is
            ignored.
    """
    cases = list(cases)
    assert cases, 'no case to check'
    failures = []
    for case in cases:
        try:
            check(case)
        except Exception as error:  # every config, not the first failure
            failures.append(_describe(case, error))
    assert not failures, (f'{len(failures)} of {len(cases)} failed:\n' +
                          '\n'.join(failures))


#: Backbone keys that only size a network (its arch, the stock spellings of
#: the arch, regularisation, weights): configs that differ in nothing else
#: train, test and evaluate through the same code.
SIZE_KEYS = frozenset({
    'arch', 'embed_dims', 'depths', 'depth', 'num_layers', 'num_heads',
    'mlp_ratio', 'mlp_ratios', 'la_start', 'drop_path_rate', 'init_cfg',
    'pretrained', 'out_indices', 'img_size', 'pretrain_img_size'
})
#: Size names in config file names, smallest first.
SIZES = ('ti', 't', 'ss', 's', 'b0', 'b1', 'm', 'b2', 'b', 'b3', 'l', 'b4')


def _types(cfg) -> tuple:
    """Every ``type`` in a config tree, in order."""
    if isinstance(cfg, dict):
        own = (str(cfg['type']), ) if 'type' in cfg else ()
        return own + sum((_types(v) for k, v in sorted(cfg.items())
                          if k != 'type'), ())
    if isinstance(cfg, (list, tuple)):
        return sum((_types(v) for v in cfg), ())
    return ()


def recipe_shape(path: str) -> tuple:
    """What a training run of config ``path`` exercises beyond the sizes:
    the task model's and its heads' types, the backbone's type and every
    backbone setting but :data:`SIZE_KEYS`, the dataset, the optimizer
    and its constructor."""
    cfg = cached_config(path)
    model = cfg.model.to_dict()
    backbone = model.pop('backbone')
    settings = sorted((k, repr(v)) for k, v in backbone.items()
                      if k not in SIZE_KEYS)
    optim = cfg.get('optim_wrapper', {})
    return (_types(model), tuple(settings),
            cfg.train_dataloader.dataset.type,
            optim.get('constructor'), _types(optim.get('optimizer', {})))


def _size_rank(path: str) -> tuple:
    found = re.search(r'-(' + '|'.join(SIZES) + r')(?=[-_])',
                      path.rsplit('/', 1)[-1])
    return (SIZES.index(found[1]) if found else len(SIZES), path)


def one_per_recipe_shape(configs: Iterable[str]) -> List[str]:
    """The smallest config of each :func:`recipe_shape`: the others differ
    only in sizes, which the quick tier builds for every config (shapes,
    parameter counts) and ``test_configs`` runs through every model."""
    groups = {}
    for path in sorted(configs, key=_size_rank):
        groups.setdefault(recipe_shape(path), path)
    return sorted(groups.values())
