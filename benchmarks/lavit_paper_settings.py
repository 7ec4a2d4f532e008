"""LaViT's two settings from its paper, measured on the demo ImageNet data.

The paper (Sec. 4.3, Eq. 9-10) trains with lr 0.005 and adds the
Diagonality-Preserving loss as printed (a sum of raw pre-softmax logits over
each LA map and over the LA layers, weight 1). The project used DeiT's lr
1e-3 and uses a bounded DP loss (softmax maps, means, in [0, 2] per layer,
averaged over the LA layers) at weight 0.1. Four runs of the real configs
through the Runner:

  (a) lr 1e-3, bounded DP x0.1   lavit-t_4xb256_in1k.py, lr 1e-3 (before)
  (b) lr 0.005, bounded DP x0.1  lavit-t_4xb256_in1k.py (the default)
  (c) lr 1e-3, paper DP (sum x1) lavit-t_paper-literal_4xb256_in1k.py, lr 1e-3
  (d) lr 0.005, paper DP (sum x1) lavit-t_paper-literal_4xb256_in1k.py

Same seed, same data order, same recipe otherwise (AdamW, wd 0.05, Mixup /
CutMix, label smoothing, drop path 0.1, no clipping); the recipe's lr
scaled to the demo batch as ``tools/train.py --auto-scale-lr`` does (base
batch 1024; the 5x ratio kept) and its schedule scaled to the run (5 of
300 epochs warm-up, then cosine to 1e-5). The demo data are 3 classes of
64x64 images (200 train / 48 val), so the network is LaViT-T (the smallest
LaViT) at 64x64: its LA maps are 16x4 (stage 3, queries pooled to 4x4) and
4x4 (stage 4), far smaller than at 224 (196x49, 49x49), which makes the
raw-logit sums of (c) / (d) smaller than on ImageNet, not larger.

Gradient norms are logged with a no-op clip (max_norm 1e30). Each run prints
its initial / final cls loss (mean of the first / last 10 iterations), the
first / last loss_dp, the median / max gradient norm, loss spikes (cls +
loss_dp above 2x the median of the 20 iterations before it), whether
anything became non-finite, and top-1 on the demo val set.

Runs (c) / (d) use the backbones' ``dp_loss_form='paper'``
(:func:`~vitattn_mm.models.attentions.less_attention.paper_diagonality_loss`).

Example (about 6 minutes on one CPU core)::

    python benchmarks/lavit_paper_settings.py
    python benchmarks/lavit_paper_settings.py --iters 100 --only a b
"""
import argparse
import math
import os.path as osp
import tempfile
import time

import numpy as np
import torch

DEFAULT = 'configs/lavit/lavit-t_4xb256_in1k.py'
LITERAL = 'configs/lavit/lavit-t_paper-literal_4xb256_in1k.py'
PAPER_DP = {'model.backbone.dp_loss_weight': 1.0,
            'model.backbone.dp_loss_form': 'paper'}
OUR_LR = {'optim_wrapper.optimizer.lr': 1e-3}
SETTINGS = [
    ('a', 'lr 1e-3, bounded DP x0.1 (before)', DEFAULT, OUR_LR),
    ('b', 'paper lr 0.005, bounded DP x0.1 (default)', DEFAULT, {}),
    ('c', 'lr 1e-3, paper DP loss (sum, x1)', LITERAL, OUR_LR),
    ('d', 'both: paper lr and DP loss (paper-literal)', LITERAL, {}),
]


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--iters', type=int, default=200)
    parser.add_argument('--batch-size', type=int, default=16)
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument('--data-root', default=None,
                        help='demo data root (default: a temporary folder)')
    parser.add_argument('--only', nargs='+', choices='abcd',
                        help='run only these settings')
    parser.add_argument('--no-mixup', action='store_true',
                        help='train without Mixup / CutMix (all settings)')
    return parser.parse_args()


def build_config(path, options, args, data_root, work_dir):
    from vitattn_tools.demo_config import make_demo_config
    from vitattn_tools.runtime import load_tool_config

    # As tools/train.py CONFIG --demo does (load_tool_config, then
    # make_demo_config).
    cfg = load_tool_config(path, work_dir=work_dir, cfg_options=options)
    paper_dp = cfg.model.backbone.get('dp_loss_form') == 'paper'
    cfg = make_demo_config(cfg, data_root=data_root, max_iters=args.iters,
                           batch_size=args.batch_size)
    if args.no_mixup:
        cfg.model.train_cfg = None
    # tools/train.py --auto-scale-lr: the recipe's lr is for batch 1024;
    # scaled linearly to this batch (the ratio 0.005 / 1e-3 is kept).
    cfg.auto_scale_lr = dict(enable=True, base_batch_size=1024)
    # The recipe's schedule (5 of 300 epochs warm-up, cosine to 1e-5), per
    # iteration; --demo keeps only iteration-based schedulers.
    warmup = max(1, round(args.iters * 5 / 300))
    cfg.param_scheduler = [
        dict(type='LinearLR', start_factor=1e-3, by_epoch=False, begin=0,
             end=warmup),
        dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=False,
             begin=warmup, end=args.iters, T_max=args.iters - warmup)
    ]
    if cfg.optim_wrapper.get('clip_grad') is None:
        cfg.optim_wrapper.clip_grad = dict(max_norm=1e30)  # logs grad_norm
    cfg.default_hooks.logger.interval = 50
    cfg.default_hooks.checkpoint = None
    cfg.log_level = 'WARNING'
    return cfg, paper_dp


def history(runner, key):
    scalars = runner.message_hub.log_scalars
    if key not in scalars:
        return np.array([])
    return np.asarray(scalars[key].data[0], dtype=float)


def spikes(total: np.ndarray, window: int = 20) -> int:
    return int(sum(
        total[i] > 2 * np.median(total[i - window:i])
        for i in range(window, len(total))))


def run(setting, args, data_root, work_root):
    from mmengine.runner import Runner
    key, label, path, options = setting
    cfg, paper_dp = build_config(path, dict(options), args, data_root,
                                 osp.join(work_root, key))
    start = time.perf_counter()
    error = None
    runner = Runner.from_cfg(cfg)
    try:
        runner.train()
    except Exception as exc:  # a diverged run may fail anywhere
        error = f'{type(exc).__name__}: {exc}'[:120]
    seconds = time.perf_counter() - start
    # AuxLossImageClassifier logs the head's loss as `loss_cls` and the
    # back-propagated total (cls + loss_dp) as `loss`.
    cls = history(runner, 'train/loss_cls')
    dp = history(runner, 'train/loss_dp')
    total = history(runner, 'train/loss')
    grad = history(runner, 'train/grad_norm')
    top1 = runner.message_hub.log_scalars.get('val/accuracy/top1')
    finite = all(np.isfinite(x).all() for x in (cls, dp, total, grad))
    return dict(
        key=key, label=label, config=osp.basename(path),
        lr=cfg.optim_wrapper.optimizer.lr,
        lr_run=runner.optim_wrapper.param_groups[0]['initial_lr']
        if 'initial_lr' in runner.optim_wrapper.param_groups[0] else
        math.nan,
        dp=('paper sum' if paper_dp else 'bounded mean') +
        f' x{cfg.model.backbone.dp_loss_weight:g}',
        cls0=cls[:10].mean(), cls1=cls[-10:].mean(),
        dp0=dp[:10].mean() if len(dp) else math.nan,
        dp1=dp[-10:].mean() if len(dp) else math.nan,
        grad_median=np.median(grad) if len(grad) else math.nan,
        grad_max=grad.max() if len(grad) else math.nan,
        spikes=spikes(total), finite=finite, error=error,
        top1=top1.current() if top1 is not None else math.nan,
        iters=len(cls), seconds=seconds)


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    import vitattn_mm  # noqa: F401  (registers the models)
    from vitattn_mm.datasets import generate_demo_data
    tmp = tempfile.TemporaryDirectory()
    data_root = args.data_root or osp.join(tmp.name, 'demo')
    generate_demo_data(data_root)
    print(f'LaViT-T on demo ImageNet (64x64, 3 classes), {args.iters} '
          f'iterations x batch {args.batch_size}, seed 0, '
          f'{args.threads} CPU thread(s), torch {torch.__version__}')
    rows = []
    for setting in SETTINGS:
        if args.only and setting[0] not in args.only:
            continue
        row = run(setting, args, data_root, tmp.name)
        rows.append(row)
        print(f"({row['key']}) {row['label']}: {row['seconds']:.0f} s",
              flush=True)
    header = ('set', 'lr', 'DP loss', 'cls first10', 'cls last10',
              'loss_dp first10', 'loss_dp last10', 'grad median', 'grad max',
              'spikes', 'finite', 'top-1')
    print('| ' + ' | '.join(header) + ' |')
    print('|' + '---|' * len(header))
    for r in rows:
        print(f"| ({r['key']}) | {r['lr']:g} | {r['dp']} | {r['cls0']:.3f} "
              f"| {r['cls1']:.3f} | {r['dp0']:.4g} | {r['dp1']:.4g} "
              f"| {r['grad_median']:.3g} | {r['grad_max']:.3g} "
              f"| {r['spikes']} | {'yes' if r['finite'] else 'NO'} "
              f"| {r['top1']:.1f} |")
        if r['error']:
            print(f"    ({r['key']}) stopped after {r['iters']} "
                  f"iterations: {r['error']}")
    tmp.cleanup()


if __name__ == '__main__':
    main()
