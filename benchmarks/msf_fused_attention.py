"""Latency of MSF attention: fused (scaled_dot_product_attention) vs
explicit (matmul, softmax, matmul), the same module with its ``fused`` flag.

Each case runs one :class:`MeanShiftAttention` as it runs inside the
backbones: Swin's shifted 7x7 windows (relative position bias + shift mask +
the key-norm term as one additive bias) and a Simple ViT's global attention
over a whole map (the key-norm term as a broadcast bias). The two paths are
timed in interleaved repeats (fused, explicit, fused, ...) so that drift of
a shared machine hits both alike; the table gives medians and the ratio
explicit / fused (> 1: the fused path is faster). Not a test: numbers
depend on the machine, which is printed first.

Examples::

    python benchmarks/msf_fused_attention.py
    python benchmarks/msf_fused_attention.py --train --repeats 9
    python benchmarks/msf_fused_attention.py --device cuda --amp
"""
import argparse
import platform
import statistics
import time
from contextlib import nullcontext

import torch

from vitattn_mm.models.attentions import MeanShiftAttention
from vitattn_mm.models.layers import shifted_window_mask

#: name -> (window or whole map (h, w), channels, heads, shifted: the
#: stage's map padded to whole windows, whose windows form the batch).
CASES = {
    'Swin-T stage 1, 224x224: 64 windows': ((7, 7), 96, 3, (56, 56)),
    'Swin-T stage 1, 800x1280: 1334 windows': ((7, 7), 96, 3, (203, 322)),
    'Swin-T stage 3, 800x1280: 96 windows': ((7, 7), 384, 12, (56, 84)),
    'ViT-S, 224x224: 196 tokens': ((14, 14), 384, 6, None),
    'ViT-S, 512x512: 1024 tokens': ((32, 32), 384, 6, None),
    'ViT-S, 800x1280: 4000 tokens': ((50, 80), 384, 6, None),
}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--device', default='cuda'
                        if torch.cuda.is_available() else 'cpu')
    parser.add_argument('--train', action='store_true',
                        help='time forward + backward (default: forward)')
    parser.add_argument('--amp', action='store_true',
                        help='bf16 autocast (fp16 on CUDA)')
    parser.add_argument('--repeats', type=int, default=7)
    parser.add_argument('--warmup', type=int, default=2)
    parser.add_argument('--threads', type=int,
                        help='torch intra-op threads on CPU')
    parser.add_argument('--cases', nargs='+', choices=list(CASES),
                        metavar='CASE', help='subset of the cases')
    return parser.parse_args()


def machine(device: torch.device) -> str:
    if device.type == 'cuda':
        return (f'{torch.cuda.get_device_name(device)}, CUDA '
                f'{torch.version.cuda}, torch {torch.__version__}')
    name = platform.processor() or platform.machine()
    try:  # Linux names the CPU model here
        with open('/proc/cpuinfo') as f:
            name = next(line.split(':', 1)[1].strip() for line in f
                        if line.startswith('model name'))
    except (OSError, StopIteration):
        pass
    return (f'{name}, {torch.get_num_threads()} threads, '
            f'torch {torch.__version__}')


def build_case(spec, device):
    (h, w), channels, heads, window_map = spec
    attn = MeanShiftAttention(
        channels, heads,
        window_size=(h, w) if window_map else None).to(device)
    mask, sequences = None, 1
    if window_map:
        # Shifted windows, the costlier half of Swin's blocks.
        mask = shifted_window_mask(window_map, (h, w), (h // 2, w // 2),
                                   device=device)
        sequences = mask.shape[0]
    x = torch.randn(sequences, h * w, channels, device=device)
    return attn, x, mask


def run_once(attn, x, mask, train, amp):
    device = x.device
    dtype = torch.float16 if device.type == 'cuda' else torch.bfloat16
    autocast = torch.autocast(device.type, dtype=dtype) if amp else \
        nullcontext()
    if train:
        x = x.detach().requires_grad_()
        with autocast:
            out, _ = attn(x, mask=mask)
        out.float().pow(2).mean().backward()
        attn.zero_grad(set_to_none=True)
    else:
        with torch.no_grad(), autocast:
            attn(x, mask=mask)
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def time_case(attn, x, mask, args):
    times = {True: [], False: []}
    for flag in (True, False):
        attn.fused = flag
        for _ in range(args.warmup):
            run_once(attn, x, mask, args.train, args.amp)
    for _ in range(args.repeats):
        for flag in (True, False):  # interleaved
            attn.fused = flag
            start = time.perf_counter()
            run_once(attn, x, mask, args.train, args.amp)
            times[flag].append(time.perf_counter() - start)
    return statistics.median(times[True]), statistics.median(times[False])


def main():
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    mode = 'forward + backward' if args.train else 'forward'
    precision = 'autocast' if args.amp else 'fp32'
    print(f'MSF attention, fused vs explicit ({mode}, {precision}, median '
          f'of {args.repeats})\nmachine: {machine(device)}\n')
    print(f'{"case":<42}{"fused ms":>10}{"explicit ms":>13}'
          f'{"explicit/fused":>16}')
    for name in args.cases or CASES:
        attn, x, mask = build_case(CASES[name], device)
        fused, explicit = time_case(attn, x, mask, args)
        print(f'{name:<42}{fused * 1e3:>10.2f}{explicit * 1e3:>13.2f}'
              f'{explicit / fused:>15.2f}x', flush=True)


if __name__ == '__main__':
    main()
