"""What a config trains with, and where each value comes from.

:func:`read_recipe` reads the training recipe of a resolved config (the
values a researcher compares with a paper's implementation details) and
pairs each value with its source: the config's own ``recipe_sources`` entry,
or, for a value it inherits unchanged from its stock OpenMMLab ``_base_``,
that base file. ``tools/recipe_table.py`` renders every shipped config's
recipe as ``docs/recipes.md``; ``tests/test_recipes.py`` fails when a config
drifts from that table or holds a value nobody vouches for.

A ``recipe_sources`` entry is one string, ``'<kind>: <where>'``:

- ``paper``: the paper's table or section the value follows;
- ``official``: the authors' code (repository and file);
- ``openmmlab``: a stock mmdet / mmseg / mmpretrain config (where a paper's
  row was trained with it, the entry says so);
- ``ours``: the project's own choice, with the reason.
"""
import ast
import os.path as osp
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Dict, Iterator, List, Optional, Tuple

from mmengine.config import Config

#: The recipe's fields, in table order, with their column titles.
FIELDS = {
    'optimizer': 'optimizer',
    'lr': 'lr',
    'weight_decay': 'wd',
    'batch': 'batch',
    'schedule': 'schedule',
    'warmup': 'warm-up',
    'drop_path': 'drop path',
    'clip_grad': 'clip',
    'ema': 'EMA',
    'augmentation': 'augmentation',
    'amp': 'AMP',
    'pretrained': 'pretrained',
}

SOURCE_KINDS = ('paper', 'official', 'openmmlab', 'ours')

#: Packages whose configs a ``pkg::path`` base names.
_STOCK_SCOPES = ('mmdet', 'mmseg', 'mmpretrain')


@dataclass
class Recipe:
    """The recipe of one config: field -> value and field -> source."""
    config: str
    values: Dict[str, str]
    sources: Dict[str, str] = field(default_factory=dict)
    stock_base: Optional[str] = None

    def unsourced(self) -> List[str]:
        """Fields whose value no source vouches for."""
        return [name for name in FIELDS if not self.sources.get(name)]

    def malformed_sources(self) -> List[str]:
        """``recipe_sources`` entries that are not ``'<kind>: <where>'``
        with a known kind and field."""
        bad = []
        for name, source in self.sources.items():
            kind, _, where = str(source).partition(':')
            if name not in FIELDS or kind not in SOURCE_KINDS or \
                    not where.strip():
                bad.append(f'{name}={source!r}')
        return bad


@lru_cache(maxsize=None)
def load_config(path: str) -> Config:
    """``Config.fromfile``, once per file (read-only use)."""
    return Config.fromfile(path)


def stock_config_path(base: str) -> str:
    """The file of a ``pkg::path`` base, as mmengine resolves it."""
    from mmengine.config.utils import _get_external_cfg_base_path
    from mmengine.utils import get_installed_path
    package, _, cfg_path = base.partition('::')
    return _get_external_cfg_base_path(get_installed_path(package), cfg_path)


@lru_cache(maxsize=None)
def read_recipe(path: str) -> Recipe:
    """The recipe of the config at ``path`` with the source of each value.

    A value without a ``recipe_sources`` entry that equals the stock base's
    is sourced ``'openmmlab: <base>'``; any other value stays unsourced.
    """
    cfg = load_config(path)
    recipe = Recipe(path, recipe_values(cfg, path))
    recipe.sources.update(cfg.get('recipe_sources') or {})
    # A source inherited from a project base vouches for the base's value
    # only: a config that changes the value must name its own source.
    for base in _bases(path):
        if '::' not in base:
            inherited = read_recipe(osp.join(osp.dirname(path), base))
            for name, value in recipe.values.items():
                if value != inherited.values[name] and recipe.sources.get(
                        name) == inherited.sources.get(name):
                    recipe.sources.pop(name, None)
    recipe.stock_base = stock_base_of(path)
    if recipe.stock_base:
        stock = _stock_values(recipe.stock_base)
        for name, value in recipe.values.items():
            if name not in recipe.sources and _same(name, stock.get(name),
                                                    value):
                recipe.sources[name] = f'openmmlab: {recipe.stock_base}'
    return recipe


@lru_cache(maxsize=None)
def _stock_values(base: str) -> Dict[str, str]:
    path = stock_config_path(base)
    return recipe_values(load_config(path), path)


def _same(name: str, stock: Optional[str], value: str) -> bool:
    """Equal values; batches by their total (4x256 is 16x64's recipe)."""
    if name == 'batch' and stock and value:
        return stock.split()[0] == value.split()[0]
    return stock == value


def _bases(path: str) -> List[str]:
    """The ``_base_`` entries a config file names."""
    with open(path) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == '_base_'
                for t in node.targets):
            value = ast.literal_eval(node.value)
            return [value] if isinstance(value, str) else list(value)
    return []


def stock_base_of(path: str) -> Optional[str]:
    """The first ``pkg::file`` base a config inherits from, following the
    project's own bases; None when there is none."""
    for base in _bases(path):
        if base.split('::')[0] in _STOCK_SCOPES and '::' in base:
            return base
        found = stock_base_of(osp.join(osp.dirname(path), base))
        if found:
            return found
    return None


def recipe_values(cfg: Config, path: str) -> Dict[str, str]:
    """The recipe's values of a resolved config, as the table prints
    them."""
    optim = cfg.get('optim_wrapper') or {}
    optimizer = optim.get('optimizer') or {}
    backbone = (cfg.get('model') or {}).get('backbone') or {}
    name = optimizer.get('type', '?')
    if name == 'SGD':
        name += f' (momentum {_num(optimizer.get("momentum", 0))})'
    clip = optim.get('clip_grad')
    return dict(
        optimizer=name,
        lr=_num(optimizer.get('lr')),
        weight_decay=_num(optimizer.get('weight_decay', 0)),
        batch=_batch(cfg, path),
        schedule=_schedule(cfg),
        warmup=_warmup(cfg),
        drop_path=_drop_path(backbone),
        clip_grad=(f'max norm {_num(clip["max_norm"])}'
                   if clip else 'none'),
        ema=_ema(cfg),
        augmentation=_augmentation(cfg),
        amp='fp16' if optim.get('type') == 'AmpOptimWrapper' else 'fp32',
        pretrained=_pretrained(cfg, backbone),
    )


def _num(value) -> str:
    """``1e-4``, ``0.05``, ``6e-5``: short, as papers print them."""
    if value is None:
        return '-'
    if value != 0 and abs(value) < 1e-3:
        mantissa, exponent = f'{value:.2e}'.split('e')
        return f'{float(mantissa):g}e{int(exponent)}'
    return f'{value:g}'


def _batch(cfg: Config, path: str) -> str:
    """Total batch, as ``GPUs x per-GPU``: from the config name's
    ``NxbM`` (mmdet / mmseg / mmpretrain naming), else from
    ``auto_scale_lr.base_batch_size``."""
    per_gpu = (cfg.get('train_dataloader') or {}).get('batch_size')
    named = re.search(r'_(\d+)xb(\d+)', osp.basename(path))
    if named:
        gpus, named_per_gpu = map(int, named.groups())
        if per_gpu is not None and per_gpu != named_per_gpu:
            return (f'{gpus * per_gpu} ({gpus}x{per_gpu}; the name says '
                    f'{gpus}x{named_per_gpu})')
        return f'{gpus * named_per_gpu} ({gpus}x{named_per_gpu})'
    base = (cfg.get('auto_scale_lr') or {}).get('base_batch_size')
    if base and per_gpu:
        return f'{base} ({base // per_gpu}x{per_gpu})'
    return f'{per_gpu} per GPU'


def _schedulers(cfg: Config) -> List[dict]:
    schedulers = cfg.get('param_scheduler') or []
    return [schedulers] if isinstance(schedulers, dict) else list(schedulers)


def _is_warmup(scheduler: dict) -> bool:
    return scheduler.get('type') == 'LinearLR' and \
        scheduler.get('begin', 0) == 0 and 'end' in scheduler


def _schedule(cfg: Config) -> str:
    loop = cfg.get('train_cfg') or {}
    if 'max_epochs' in loop:
        length = f'{loop["max_epochs"]} ep'
    else:
        iters = loop.get('max_iters', 0)
        length = f'{iters // 1000}k it' if iters % 1000 == 0 else \
            f'{iters} it'
    decays = []
    for scheduler in _schedulers(cfg):
        if _is_warmup(scheduler):
            continue
        kind = scheduler.get('type', '?')
        if kind == 'MultiStepLR':
            decays.append(f'step {list(scheduler["milestones"])}')
        elif kind == 'CosineAnnealingLR':
            decays.append('cosine' + (
                f' to {_num(scheduler["eta_min"])}'
                if scheduler.get('eta_min') else ''))
        elif kind == 'PolyLR':
            decays.append(f'poly {_num(scheduler.get("power", 1))}')
        else:
            decays.append(kind)
    return ', '.join([length] + decays)


def _warmup(cfg: Config) -> str:
    for scheduler in _schedulers(cfg):
        if _is_warmup(scheduler):
            unit = 'ep' if scheduler.get('by_epoch', True) else 'it'
            return f'linear {scheduler["end"]} {unit}'
    return 'none'


def _drop_path(backbone: dict) -> str:
    """The backbone's drop path rate; the class default when the config
    leaves it out."""
    for key in ('drop_path_rate', 'drop_path'):
        if key in backbone:
            return _num(backbone[key])
    default = _class_default(backbone.get('type'), 'drop_path_rate')
    return f'{_num(default)} (default)' if default is not None else '-'


def _class_default(type_name, argument):
    import inspect

    import vitattn_mm.models  # noqa: F401  (registers the backbones)
    from mmengine.registry import MODELS
    if not isinstance(type_name, str):
        return None
    for scope in ('vitattn_mm', 'mmdet', 'mmseg', 'mmpretrain'):
        try:
            cls = MODELS.get(f'{scope}.{type_name}')
        except Exception:  # a scope whose package is not installed
            cls = None
        if cls is not None:
            parameter = inspect.signature(cls).parameters.get(argument)
            if parameter is not None and \
                    parameter.default is not inspect.Parameter.empty:
                return parameter.default
    return None


def _ema(cfg: Config) -> str:
    for hook in cfg.get('custom_hooks') or []:
        if 'EMA' in str(hook.get('type', '')):
            return f'momentum {_num(hook.get("momentum", 2e-4))}'
    return 'none'


def _transforms(pipeline) -> Iterator[dict]:
    """Every transform of a pipeline, nested ones (RandomChoice,
    RandomApply) included."""
    for item in pipeline or []:
        if isinstance(item, (list, tuple)):
            yield from _transforms(item)
        elif isinstance(item, dict):
            yield item
            yield from _transforms(item.get('transforms'))


def _train_pipeline(cfg: Config) -> list:
    dataset = (cfg.get('train_dataloader') or {}).get('dataset') or {}
    while 'pipeline' not in dataset and 'dataset' in dataset:
        dataset = dataset['dataset']  # RepeatDataset, ClassBalanced ...
    return dataset.get('pipeline') or []


def _short_sides(scales) -> Tuple[int, int, int]:
    if isinstance(scales, (int, float)):
        return int(scales), int(scales), 1
    if scales and isinstance(scales[0], (int, float)):
        scales = [scales]
    shorts = [min(scale) for scale in scales]
    return min(shorts), max(shorts), len(shorts)


def _augmentation(cfg: Config) -> str:
    """The train pipeline's scale, crop and augmentation policy."""
    parts = []
    transforms = list(_transforms(_train_pipeline(cfg)))
    kinds = [t.get('type') for t in transforms]
    for t in transforms:
        kind = t.get('type')
        if kind == 'Resize' and 'scale' in t and \
                'RandomChoiceResize' not in kinds:
            parts.append('single scale {}x{}'.format(*t['scale']))
        elif kind == 'RandomChoiceResize' and not parts:
            low, high, count = _short_sides(t['scales'])
            parts.append(f'multi-scale short side {low}-{high} '
                         f'({count} scales)')
        elif kind == 'RandomResize':
            if t.get('ratio_range'):
                low, high = t['ratio_range']
                parts.append('resize {}x{} x{:g}-{:g}'.format(
                    *t['scale'], low, high))
            else:
                low, high, _ = _short_sides(t['scale'])
                parts.append(f'multi-scale short side {low}-{high} (range)')
        elif kind == 'RandomCrop':
            size = t.get('crop_size')
            parts.append('random crop' if t.get('crop_type') else
                         'crop {}x{}'.format(*size))
        elif kind == 'RandomResizedCrop':
            parts.append(f'random resized crop {t.get("scale")}')
        elif kind == 'RandAugment':
            parts.append(f'RandAugment m{t.get("magnitude_level")} '
                         f'n{t.get("num_policies")}')
        elif kind == 'RandomErasing':
            parts.append(f'erasing {_num(t.get("erase_prob"))}')
    sampler = (cfg.get('train_dataloader') or {}).get('sampler') or {}
    if sampler.get('type') == 'RepeatAugSampler':
        parts.append(f'repeated aug x{sampler.get("num_repeats", 3)}')
    model = cfg.get('model') or {}
    for augment in (model.get('train_cfg') or {}).get('augments') or []:
        parts.append(f'{augment["type"].lower()} {_num(augment["alpha"])}')
    loss = (model.get('head') or {}).get('loss') or {}
    if loss.get('label_smooth_val'):
        parts.append(f'label smoothing {_num(loss["label_smooth_val"])}')
    return ', '.join(dict.fromkeys(parts)) or 'none'


def backbone_checkpoint(cfg: Config) -> Optional[str]:
    """The file the backbone's ``init_cfg`` loads, if any."""
    init_cfg = (cfg.get('model') or {}).get('backbone', {}).get('init_cfg')
    return init_cfg.get('checkpoint') if isinstance(init_cfg,
                                                    dict) else None


def _pretrained(cfg: Config, backbone: dict) -> str:
    checkpoint = backbone_checkpoint(cfg)
    if checkpoint:
        key = backbone['init_cfg'].get('state_dict_key')
        return checkpoint + (f' [{key}]' if key else '')
    if cfg.get('load_from'):
        return f'load_from {cfg.load_from}'
    return 'none (from scratch)'


_KIND_TITLES = dict(paper='paper', official='official code',
                    openmmlab='OpenMMLab config', ours='ours')


def _cell(text: str) -> str:
    return str(text).replace('|', '\\|')


def render_recipes(recipes: List[Recipe], command: str) -> str:
    """``docs/recipes.md``: per folder a table of every config's values,
    then each config's values with their sources."""
    lines = [
        '# Training recipes', '',
        f'Generated by `{command}` from the resolved configs; '
        '`tests/test_recipes.py` fails when a config drifts from it. Each '
        "value's source is the config's `recipe_sources` entry: the "
        "**paper** (table or section), the authors' **official code** "
        '(file), a stock **OpenMMLab config** (inherited unchanged, or '
        'named because a paper row was trained with it) or **ours** (the '
        "project's choice, with the reason). Batch is the total, as GPUs x "
        'images per GPU; an iteration-based schedule counts iterations of '
        'that batch.', ''
    ]
    folders: Dict[str, List[Recipe]] = {}
    for recipe in recipes:
        folders.setdefault(osp.dirname(recipe.config), []).append(recipe)
    for folder, members in folders.items():
        lines += [f'## {folder}', '']
        lines.append('| config | ' + ' | '.join(FIELDS.values()) + ' |')
        lines.append('| --- ' * (len(FIELDS) + 1) + '|')
        for recipe in members:
            name = osp.splitext(osp.basename(recipe.config))[0]
            lines.append(f'| [{name}](#{_anchor(recipe.config)}) | ' +
                         ' | '.join(_cell(recipe.values[f])
                                    for f in FIELDS) + ' |')
        lines.append('')
        for recipe in members:
            lines += [f'### {recipe.config}', '']
            if recipe.stock_base:
                lines += [f'Stock base: `{recipe.stock_base}`.', '']
            lines += ['| | value | source |', '| --- | --- | --- |']
            for name, title in FIELDS.items():
                kind, _, where = recipe.sources.get(
                    name, 'NONE: no source').partition(':')
                lines.append(f'| {title} | {_cell(recipe.values[name])} | '
                             f'{_KIND_TITLES.get(kind, kind)}: '
                             f'{_cell(where.strip())} |')
            lines.append('')
    return '\n'.join(lines)


def _anchor(config: str) -> str:
    """GitHub's anchor of a ``### <config>`` heading."""
    return re.sub(r'[^a-z0-9 _-]', '', config.lower()).replace(' ', '-')
