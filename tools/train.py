"""Train a detector, segmentor or classifier (mmdet's interface).

The task follows the config's ``default_scope`` (mmdet / mmseg /
mmpretrain). Works on CPU-only machines too: ``--launcher pytorch`` then
runs gloo processes, and ``--amp`` uses bf16 autocast.

Examples::

    python tools/train.py CONFIG [--work-dir DIR] [--amp] [--resume [CKPT]]
    bash tools/dist_train.sh CONFIG 8
    python tools/train.py CONFIG --demo   # a few iterations on demo data
"""
import argparse
import os

from mmengine.config import Config, DictAction
from mmengine.registry import RUNNERS
from mmengine.runner import Runner

import vitattn_mm  # noqa: F401  (registers models, safe checkpoint loading)
from vitattn_mm.utils.compile import add_compile_backbone_hook
from vitattn_tools.runtime import (adapt_to_device, enable_amp,
                                   ends_process_group, load_tool_config,
                                   setup_launcher)


def parse_args():
    parser = argparse.ArgumentParser(
        description='Train a detector, segmentor or classifier')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--work-dir', help='the dir to save logs and models')
    parser.add_argument(
        '--amp',
        action='store_true',
        default=False,
        help='mixed precision: fp16 with dynamic loss scaling on CUDA, '
        'bf16 autocast on CPU')
    parser.add_argument(
        '--auto-scale-lr',
        action='store_true',
        help='scale the learning rate by the actual total batch size')
    parser.add_argument(
        '--resume',
        nargs='?',
        type=str,
        const='auto',
        help='resume from CKPT, or without a value from the latest '
        'checkpoint in the work directory')
    parser.add_argument(
        '--demo',
        nargs='?',
        const='data/demo',
        metavar='DATA_ROOT',
        help='run the recipe on the embedded demo data (generated if '
        'missing) for --demo-iters iterations')
    parser.add_argument('--demo-iters', type=int, default=20)
    parser.add_argument(
        '--compile-backbone',
        nargs='?',
        const='inductor',
        metavar='BACKEND',
        help='torch.compile the backbone (dynamic shapes; BACKEND '
        "'inductor' by default, 'aot_eager' or 'eager' to skip code "
        'generation); see docs/deployment.md')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=DictAction,
        help='override settings in the config, key=value pairs')
    parser.add_argument(
        '--launcher',
        choices=['none', 'pytorch', 'slurm', 'mpi'],
        default='none',
        help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args()
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def build_config(args) -> Config:
    cfg = load_tool_config(args.config, args.work_dir, args.cfg_options,
                           args.demo, args.demo_iters)
    if args.amp:
        enable_amp(cfg)
    if args.auto_scale_lr:
        if not cfg.get('auto_scale_lr', {}).get('base_batch_size'):
            raise RuntimeError('--auto-scale-lr needs "auto_scale_lr.'
                               'base_batch_size" in the config')
        cfg.auto_scale_lr.enable = True

    if args.resume == 'auto':
        cfg.resume = True
        cfg.load_from = None
    elif args.resume is not None:
        cfg.resume = True
        cfg.load_from = args.resume
    setup_launcher(cfg, args.launcher)
    if args.compile_backbone:
        add_compile_backbone_hook(cfg, args.compile_backbone)
    adapt_to_device(cfg)
    return cfg


@ends_process_group
def main():
    args = parse_args()
    cfg = build_config(args)
    runner = (Runner.from_cfg(cfg)
              if 'runner_type' not in cfg else RUNNERS.build(cfg))
    runner.train()


if __name__ == '__main__':
    main()
