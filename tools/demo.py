"""The main job on the embedded demo data: train a detector with one of our
attention backbones, evaluate it with the real COCO evaluator, and print box
and mask AP of the trained model beside the untrained one (same val split).

    python tools/demo.py [--config CONFIG] [--work-dir DIR] [--data-root DIR]

Everything runs on a CPU in a few minutes; the data is generated, not
downloaded.
"""
import argparse
import os.path as osp

from mmengine.runner import Runner

import vitattn_mm  # noqa: F401
from vitattn_mm.datasets import generate_demo_data
from vitattn_tools.runtime import ends_process_group, load_tool_config

DEFAULT_CONFIG = 'configs/demo/mask-rcnn_flatten-swin-nano_fpn_8e_demo.py'
SHOWN_METRICS = (('coco/bbox_mAP', 'box AP'), ('coco/bbox_mAP_50', 'box AP50'),
                 ('coco/segm_mAP', 'mask AP'), ('coco/segm_mAP_50',
                                                'mask AP50'))


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--config', default=DEFAULT_CONFIG)
    parser.add_argument('--work-dir', default='work_dirs/demo')
    parser.add_argument('--data-root', default='data/demo',
                        help='where the demo data is (generated if absent)')
    return parser.parse_args()


@ends_process_group
def main():
    args = parse_args()
    paths = generate_demo_data(args.data_root)
    cfg = load_tool_config(
        args.config, work_dir=args.work_dir,
        cfg_options={
            'train_dataloader.dataset.data_root': paths['coco'],
            'val_dataloader.dataset.data_root': paths['coco'],
            'test_dataloader.dataset.data_root': paths['coco'],
            'val_evaluator.ann_file': osp.join(
                paths['coco'], 'annotations', 'instances_val.json'),
            'test_evaluator.ann_file': osp.join(
                paths['coco'], 'annotations', 'instances_val.json'),
        })
    runner = Runner.from_cfg(cfg)
    runner.train()
    before = runner.message_hub.get_info('metrics_before_train')
    after = {
        key: runner.message_hub.get_scalar(f'val/{key}').current()
        for key, _ in SHOWN_METRICS
    }
    if before is None:
        raise RuntimeError('the config must add EvaluateBeforeTrainHook to '
                           'custom_hooks to report the untrained baseline')
    backbone = cfg.model.backbone.type
    print(f'\nDemo: Mask R-CNN with {backbone} on the demo COCO val split '
          f'({len(runner.val_dataloader.dataset)} images)')
    print(f'{"metric":<12}{"untrained":>12}{"trained":>12}')
    for key, name in SHOWN_METRICS:
        print(f'{name:<12}{before[key]:>12.3f}{after[key]:>12.3f}')
    last = osp.join(cfg.work_dir, f'epoch_{cfg.train_cfg.max_epochs}.pth')
    print(f'\nRe-evaluate the checkpoint with:\n  python tools/test.py '
          f'{args.config} {last}')


if __name__ == '__main__':
    main()
