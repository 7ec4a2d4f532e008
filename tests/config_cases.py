"""What the config and recipe tests share: the config lists, each config read
once per session, and one assertion that checks many configs.

A config check is a function of one path; :func:`check_each` runs it over
every config and fails once, naming each config that failed with its error,
so one pytest item covers a whole family without stopping at the first bad
config.
"""
import copy
import glob
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
