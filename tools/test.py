"""Evaluate a checkpoint (mmdet's interface): COCO box/mask AP for
detectors, mIoU for segmentors, top-1 for classifiers.

Examples::

    python tools/test.py CONFIG CHECKPOINT [--out results.pkl] [--show-dir DIR]
    bash tools/dist_test.sh CONFIG CHECKPOINT 8
"""
import argparse
import copy
import os

from mmengine.config import Config, ConfigDict, DictAction
from mmengine.registry import RUNNERS
from mmengine.runner import Runner

import vitattn_mm  # noqa: F401  (registers models, safe checkpoint loading)
from vitattn_mm.utils.compile import (add_compile_backbone_hook,
                                      compile_test_step)
from vitattn_tools.runtime import (adapt_to_device, ends_process_group,
                                   load_tool_config, setup_launcher, task_of)


def parse_args():
    parser = argparse.ArgumentParser(
        description='Test (and evaluate) a detector, segmentor or classifier')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument(
        '--work-dir',
        help='the directory to save the file containing evaluation metrics')
    parser.add_argument(
        '--out', help='dump predictions to a pickle file (.pkl)')
    parser.add_argument(
        '--show', action='store_true', help='show prediction results')
    parser.add_argument(
        '--show-dir', help='directory where painted images will be saved')
    parser.add_argument(
        '--wait-time', type=float, default=2, help='the interval of show (s)')
    parser.add_argument(
        '--demo',
        nargs='?',
        const='data/demo',
        metavar='DATA_ROOT',
        help='evaluate on the embedded demo data (as train.py --demo)')
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
    parser.add_argument(
        '--allow-partial',
        action='store_true',
        help='evaluate even when the checkpoint fills less than half of the '
        "model's weights (by default refused: the rest would be random)")
    parser.add_argument('--tta', action='store_true',
                        help="test-time augmentation: the config's tta_model "
                        'and tta_pipeline, or else flip TTA (detectors and '
                        'classifiers)')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args()
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def enable_visualization(cfg: Config, task: str, args) -> None:
    hooks = cfg.default_hooks
    if 'visualization' not in hooks:
        raise RuntimeError('--show/--show-dir need a "visualization" hook in '
                           'default_hooks')
    hook = hooks['visualization']
    if task == 'classification':
        hook.update(enable=True, show=args.show, wait_time=args.wait_time)
        if args.show_dir:
            hook['out_dir'] = args.show_dir
        return
    hook.update(draw=True, show=args.show, wait_time=args.wait_time)
    if args.show_dir and task == 'detection':
        hook['test_out_dir'] = args.show_dir
    elif args.show_dir:
        cfg.visualizer['save_dir'] = args.show_dir


#: ``--tta`` without a ``tta_model`` in the config: flip TTA, as the stock
#: test.py of mmdet (merge the boxes) and mmpretrain (average the scores).
FLIP_TTA_MODELS = {
    'detection':
    dict(type='DetTTAModel',
         tta_cfg=dict(nms=dict(type='nms', iou_threshold=0.5),
                      max_per_img=100)),
    'classification': dict(type='AverageClsScoreTTA'),
}


def enable_tta(cfg: Config, task: str) -> None:
    if 'tta_model' not in cfg:
        if task not in FLIP_TTA_MODELS:
            raise RuntimeError(f'--tta for {task} needs tta_model and '
                               'tta_pipeline in the config')
        cfg.tta_model = copy.deepcopy(FLIP_TTA_MODELS[task])
    if 'tta_pipeline' not in cfg:
        dataset = cfg.test_dataloader.dataset
        while 'dataset' in dataset:
            dataset = dataset['dataset']
        pipeline = copy.deepcopy(dataset.pipeline)
        pack = pipeline[-1]
        if 'meta_keys' in pack:  # the default meta keys include the flip
            pack = dict(pack, meta_keys=tuple(pack['meta_keys']) +
                        ('flip', 'flip_direction'))
        pipeline[-1] = dict(
            type='TestTimeAug',
            transforms=[[dict(type='RandomFlip', prob=1.),
                         dict(type='RandomFlip', prob=0.)], [pack]])
        cfg.tta_pipeline = pipeline
    cfg.model = ConfigDict(**cfg.tta_model, module=cfg.model)
    cfg.test_dataloader.dataset.pipeline = cfg.tta_pipeline


def add_dump_metric(runner: Runner, task: str, out: str) -> None:
    if not out.endswith(('.pkl', '.pickle')):
        raise ValueError('--out must be a .pkl file')
    if task == 'detection':
        from mmdet.evaluation import DumpDetResults as DumpResults
    else:
        from mmengine.evaluator import DumpResults
    runner.test_evaluator.metrics.append(DumpResults(out_file_path=out))


@ends_process_group
def main():
    args = parse_args()
    cfg = load_tool_config(args.config, args.work_dir, args.cfg_options,
                           args.demo)
    task = task_of(cfg)
    cfg.load_from = args.checkpoint
    if args.allow_partial:
        cfg.allow_partial_load = True
    if args.show or args.show_dir:
        enable_visualization(cfg, task, args)
    if args.tta:
        enable_tta(cfg, task)
    setup_launcher(cfg, args.launcher)
    if args.compile_backbone:
        add_compile_backbone_hook(cfg, args.compile_backbone)
    adapt_to_device(cfg)

    runner = (Runner.from_cfg(cfg)
              if 'runner_type' not in cfg else RUNNERS.build(cfg))
    compile_test_step(runner)  # a config's compile=... as training has it
    if args.out is not None:
        add_dump_metric(runner, task, args.out)
    runner.test()


if __name__ == '__main__':
    main()
