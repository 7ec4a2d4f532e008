"""Every shipped config trains with the recipe docs/recipes.md states, each
value has a source, and every config refuses a checkpoint that would leave
its model random, with OpenMMLab's own tools too."""
import glob
import os.path as osp
import re
import sys

import pytest
import torch
from mmengine.config import Config
from mmengine.runner import Runner

sys.path.insert(0, 'tools')
from recipe_table import COMMAND, TABLE, shipped_configs  # noqa: E402

from config_cases import check_each  # noqa: E402
from vitattn_tools.recipes import (FIELDS, load_config,  # noqa: E402
                                   read_recipe, render_recipes,
                                   stock_base_of, stock_config_path)

CONFIGS = shipped_configs()


@pytest.fixture(scope='module')
def recipes():
    return {path: read_recipe(path) for path in CONFIGS}


def _sections(text):
    """``### <config>`` -> that config's lines of the table."""
    sections, name = {}, None
    for line in text.splitlines():
        if line.startswith('### '):
            name = line[4:].strip()
            sections[name] = []
        elif line.startswith('## '):
            name = None
        elif name:
            sections[name].append(line)
    return sections


def test_recipe_table_lists_every_config():
    with open(TABLE) as f:
        documented = _sections(f.read())
    assert sorted(documented) == CONFIGS, (
        f'{TABLE} is out of date: run {COMMAND}')


def test_configs_train_with_the_documented_recipe(recipes):
    """A config whose optimizer, schedule, augmentation ... (or a value's
    source) no longer matches docs/recipes.md fails, naming the config and
    the field; `python tools/recipe_table.py` regenerates the table after a
    deliberate change."""
    with open(TABLE) as f:
        text = f.read()
    documented = _sections(text)
    generated = _sections(render_recipes(list(recipes.values()), COMMAND))
    drifted = []
    for config, lines in generated.items():
        old = set(documented.get(config, []))
        drifted += [f'{config}: {line}' for line in lines if line not in old]
    assert not drifted, (
        f'configs differ from {TABLE} (run {COMMAND} if the change is '
        'meant):\n' + '\n'.join(drifted))
    assert text == render_recipes(list(recipes.values()), COMMAND) + '\n'


def test_every_recipe_value_has_a_source(recipes):

    def has_sources(config):
        recipe = recipes[config]
        assert not recipe.malformed_sources(), recipe.malformed_sources()
        assert not recipe.unsourced(), (
            f'{config}: no recipe_sources entry for {recipe.unsourced()} '
            '(values that differ from the stock base need one)')

    check_each(CONFIGS, has_sources)


def test_recipe_values_read_the_resolved_config(tmp_path):
    """The reader against a config written here: a drift in any field
    changes its row."""
    base = 'configs/baselines/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py'
    stock = read_recipe(base)
    drifted = tmp_path / 'mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py'
    drifted.write_text(
        f"_base_ = ['{osp.abspath(base)}']\n"
        'optim_wrapper = dict(optimizer=dict(lr=2e-4), '
        'clip_grad=dict(max_norm=1.0))\n'
        "model = dict(backbone=dict(drop_path_rate=0.3))\n"
        "custom_hooks = [dict(type='EMAHook', momentum=1e-4)]\n")
    recipe = read_recipe(str(drifted))
    changed = {f for f in FIELDS if recipe.values[f] != stock.values[f]}
    assert changed == {'lr', 'drop_path', 'clip_grad', 'ema'}
    assert recipe.values['lr'] == '2e-4'
    assert recipe.values['clip_grad'] == 'max norm 1'
    assert recipe.values['ema'] == 'momentum 1e-4'
    # Inherited through a project base: the stock base is still found, and
    # the changed values have no source until the config names one.
    assert recipe.stock_base == stock.stock_base
    assert set(recipe.unsourced()) >= {'lr', 'drop_path', 'clip_grad'}


def test_batch_is_read_from_the_name_or_auto_scale_lr(recipes):
    assert recipes['configs/baselines/upernet_swin-t-p4-w7_8xb2-160k_'
                   'ade20k-512x512.py'].values['batch'] == '16 (8x2)'
    assert recipes['configs/baselines/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py'
                   ].values['batch'] == '16 (8x2)'


def _carries_the_checkpoint_check(config):
    cfg = load_config(config)
    hooks = [hook['type'] for hook in cfg.get('custom_hooks') or []]
    assert hooks.count('CheckpointCheckHook') == 1, hooks
    base = stock_base_of(config)
    if base:
        stock = load_config(stock_config_path(base))
        for hook in stock.get('custom_hooks') or []:
            assert hook['type'] in hooks, f'stock {hook["type"]} dropped'


def test_every_config_carries_the_checkpoint_check():
    """So mmdet's / mmseg's / mmpretrain's own tools/train.py refuse a
    load_from file that fills (almost) nothing, as ours do; hooks of the
    stock base are kept."""
    check_each(CONFIGS + sorted(glob.glob('configs/demo/*.py')),
               _carries_the_checkpoint_check)


def test_stock_runner_refuses_an_unconverted_official_file(tmp_path):
    """What mmdet's tools/train.py does with ``--cfg-options load_from=``:
    Runner.from_cfg on the shipped config, no project tool involved."""
    config = 'configs/flatten/mask-rcnn_flatten-swin-t_fpn_1x_coco.py'
    official = str(tmp_path / 'flatten_swin_t.pth')
    torch.save({'model': {
        'patch_embed.proj.weight': torch.zeros(96, 3, 4, 4),
        'layers.0.blocks.0.attn.qkv.weight': torch.zeros(288, 96),
        'head.weight': torch.zeros(1000, 768)}}, official)
    cfg = Config.fromfile(config)
    cfg.work_dir = str(tmp_path / 'work_dir')
    cfg.load_from = official
    cfg.model.backbone.init_cfg = None
    runner = Runner.from_cfg(cfg)
    with pytest.raises(RuntimeError, match=re.escape(official)):
        runner.load_or_resume()


def test_every_pretrained_file_is_listed_with_where_to_get_it():
    """Each file a downstream config loads through init_cfg is in
    configs/pretrained.yml (provider, where to get it), and docs/
    model_zoo.md's weights table is what that file and the zoo's configs
    give."""
    from vitattn_tools.model_zoo import (WEIGHTS_TITLE,
                                         downstream_checkpoints,
                                         load_metafiles, load_weights,
                                         weights_section)
    used = downstream_checkpoints(CONFIGS)
    weights = load_weights()
    listed = [w['Checkpoint'] for w in weights]
    assert len(listed) == len(set(listed))
    assert not sorted(set(used) - set(listed)), 'add them to pretrained.yml'
    assert not sorted(set(listed) - set(used)), 'no config loads these'
    for entry in weights:
        assert entry['Weights'] and entry['Provider'] and entry['Get']
    with open('docs/model_zoo.md') as f:
        doc = f.read()
    assert WEIGHTS_TITLE in doc
    zoo = [e.config for e in load_metafiles(
        sorted(glob.glob('configs/*/metafile.yml')))]
    assert doc[doc.index(WEIGHTS_TITLE):] == weights_section(zoo), (
        'regenerate docs/model_zoo.md (tools/get_flops.py --table)')
