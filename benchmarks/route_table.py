"""What the benchmarks that set two routes of one computation side by side
share (``lavit_dp_loss.py``, ``drop_path_residual.py``): their options, the
machine line and table head they print, and the CPU times of the routes in
interleaved repeats (route a, route b, route a, ...), so that drift of a
shared machine hits every route alike."""
import argparse
import platform
import statistics
import time
from typing import Callable, Dict, Hashable, Sequence

import torch


def parse_cpu_args(description: str) -> argparse.Namespace:
    """``--repeats`` and ``--threads``; sets the threads and prints the
    machine and the table's head."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument('--repeats', type=int, default=8)
    parser.add_argument('--threads', type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f'{platform.processor() or platform.machine()}, torch '
          f'{torch.__version__}, {args.threads} thread(s), fp32 on the CPU')
    print('| case | route | projected ms | GB moved | ops | CPU ms |')
    print('| --- | --- | --- | --- | --- | --- |')
    return args


def interleaved_medians(routes: Sequence[Hashable],
                        prepare: Callable[[Hashable], Callable[[], None]],
                        repeats: int) -> Dict[Hashable, float]:
    """Median ms of each route over ``repeats`` interleaved rounds after
    one warm-up round; ``prepare(route)`` makes the fresh inputs (not
    timed) and returns the call that is timed."""
    times = {route: [] for route in routes}
    for _ in range(repeats + 1):
        for route in routes:
            run = prepare(route)
            start = time.perf_counter()
            run()
            times[route].append(time.perf_counter() - start)
    return {route: statistics.median(t[1:]) * 1e3
            for route, t in times.items()}
