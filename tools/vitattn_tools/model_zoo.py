"""Model-zoo tables: our measured params/FLOPs beside the papers' numbers.

Paper numbers live next to the configs, in OpenMMLab-style metafiles
(``configs/<family>/metafile.yml``)::

    Collections:
      - Name: FLatten
        Paper: {Title: ..., URL: ...}
        Convention: full              # FLOP convention of the paper's tables
    Models:
      - Name: mask-rcnn_flatten-pvt-t_fpn_1x_coco
        In Collection: FLatten
        Config: configs/flatten/mask-rcnn_flatten-pvt-t_fpn_1x_coco.py
        Paper: {Params: 32, FLOPs: 244}   # M, G (multiply-adds)
        Convention: no_attn_matmul        # optional per-model override
        Note: why a row differs           # optional

``tools/get_flops.py --table OUT.md`` turns them into docs/model_zoo.md.
"""
import os.path as osp
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import yaml

from .flops import CONVENTIONS, Complexity

CONVENTION_TITLES = {
    'full': 'with attention matmuls',
    'no_attn_matmul': 'without attention matmuls (mmcv 1.x counter)',
}


@dataclass
class ZooEntry:
    name: str
    config: str
    collection: str
    paper_params: Optional[float] = None
    paper_flops: Optional[float] = None
    convention: str = 'full'
    note: str = ''


def load_metafiles(paths: Iterable[str]) -> List[ZooEntry]:
    """Read metafiles into entries (in file order)."""
    entries = []
    for path in paths:
        with open(path) as f:
            meta = yaml.safe_load(f) or {}
        collections = {c['Name']: c for c in meta.get('Collections', [])}
        for model in meta.get('Models', []):
            collection = collections.get(model.get('In Collection'), {})
            convention = model.get('Convention',
                                   collection.get('Convention', 'full'))
            if convention not in CONVENTIONS:
                raise ValueError(f'{path}: {model["Name"]} has convention '
                                 f'{convention!r}; use one of {CONVENTIONS}')
            paper = model.get('Paper') or {}
            entries.append(
                ZooEntry(name=model['Name'],
                         config=model['Config'],
                         collection=model.get('In Collection', ''),
                         paper_params=paper.get('Params'),
                         paper_flops=paper.get('FLOPs'),
                         convention=convention,
                         note=model.get('Note', '')))
    return entries


def entries_for_configs(configs: Sequence[str],
                        metafile_entries: Sequence[ZooEntry]
                        ) -> List[ZooEntry]:
    """Entries for config paths, with paper numbers where a metafile has
    them (looked up in each config's folder)."""
    by_config = {osp.normpath(e.config): e for e in metafile_entries}
    result = []
    for config in configs:
        key = osp.normpath(config)
        if key not in by_config:
            metafile = osp.join(osp.dirname(config), 'metafile.yml')
            if osp.isfile(metafile):
                by_config.update({osp.normpath(e.config): e
                                  for e in load_metafiles([metafile])})
        result.append(by_config.get(key) or ZooEntry(
            name=osp.splitext(osp.basename(config))[0], config=config,
            collection=''))
    return result


def _delta(ours: float, paper: Optional[float]) -> str:
    if not paper:
        return ''
    return f'{(ours - paper) / paper * 100:+.1f}%'


def _num(value: Optional[float], digits: int = 1) -> str:
    return '' if value is None else f'{value:.{digits}f}'


def render_table(rows: Sequence[Tuple[ZooEntry, Complexity]],
                 title: str = 'Model zoo',
                 preamble: str = '') -> str:
    """Markdown: one table per collection, ours beside the paper's."""
    grouped: Dict[str, List[Tuple[ZooEntry, Complexity]]] = {}
    for entry, result in rows:
        grouped.setdefault(entry.collection or 'Other', []).append(
            (entry, result))
    out = [f'# {title}', '']
    if preamble:
        out += [preamble.strip(), '']
    for collection, items in grouped.items():
        out += [f'## {collection}', '']
        out.append('| config | input | params (M) | paper params (M) | '
                   'GFLOPs (with attn matmul) | GFLOPs (w/o attn matmul) | '
                   'paper GFLOPs | paper convention | Δ params | Δ FLOPs | '
                   'note |')
        out.append('|' + ' --- |' * 11)
        for entry, result in items:
            h, w = result.input_shape
            params = result.total_params / 1e6
            ours_paper_conv = result.total_flops(entry.convention) / 1e9
            config_link = f'[{entry.name}](../{entry.config})'
            digits = 2 if params < 20 else 1
            out.append(
                f'| {config_link} | {h}x{w} | {params:.{digits}f} | '
                f'{_num(entry.paper_params, digits)} | '
                f'{result.total_flops("full") / 1e9:.1f} | '
                f'{result.total_flops("no_attn_matmul") / 1e9:.1f} | '
                f'{_num(entry.paper_flops)} | '
                f'{"with" if entry.convention == "full" else "w/o"} | '
                f'{_delta(params, entry.paper_params)} | '
                f'{_delta(ours_paper_conv, entry.paper_flops)} | '
                f'{entry.note} |')
        out.append('')
    return '\n'.join(out)


#: Where the downstream configs' backbone weights come from.
WEIGHTS_FILE = 'configs/pretrained.yml'
WEIGHTS_TITLE = '## Pretrained backbone weights'


def downstream_checkpoints(configs: Iterable[str]) -> Dict[str, List[str]]:
    """Backbone checkpoint -> the detection / segmentation configs that
    load it through ``init_cfg``."""
    from .recipes import backbone_checkpoint, load_config
    used: Dict[str, List[str]] = {}
    for path in configs:
        cfg = load_config(path)
        if cfg.get('default_scope') not in ('mmdet', 'mmseg'):
            continue
        checkpoint = backbone_checkpoint(cfg)
        if checkpoint:
            used.setdefault(checkpoint, []).append(path)
    return used


def render_weights(weights: Sequence[dict],
                   used: Dict[str, List[str]]) -> str:
    """Markdown: each pretrained file, where to get it, how to load it, and
    the configs that expect it."""
    out = [
        WEIGHTS_TITLE, '',
        f'From `{WEIGHTS_FILE}` and the configs\' `init_cfg`. A URL is '
        'downloaded by the config itself; a `pretrain/...` path is the '
        'file to download (or train) and place there. Official '
        "classification files (`{'model': ...}`, the authors' key names) "
        'load through `init_cfg` as they are; the converter is only needed '
        'for `load_from` or another codebase.', '',
        '| checkpoint | weights | provider | get it | sha256 | configs |',
        '| --- | --- | --- | --- | --- | --- |'
    ]
    for entry in weights:
        checkpoint = entry['Checkpoint']
        configs = ', '.join(
            f'[{osp.splitext(osp.basename(c))[0]}](../{c})'
            for c in used.get(checkpoint, []))
        out.append(f'| `{checkpoint}` | {entry["Weights"]} | '
                   f'{entry["Provider"]} | {entry["Get"]} | '
                   f'{entry.get("SHA256") or "not published"} | {configs} |')
    return '\n'.join(out) + '\n'


def load_weights(path: str = WEIGHTS_FILE) -> List[dict]:
    with open(path) as f:
        return yaml.safe_load(f)['Weights']


def weights_section(configs: Iterable[str]) -> str:
    """docs/model_zoo.md's weights table for these (the zoo's) configs."""
    used = downstream_checkpoints(dict.fromkeys(configs))
    return render_weights(
        [w for w in load_weights() if w['Checkpoint'] in used], used)
