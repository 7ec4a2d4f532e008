"""``torch.compile`` of the backbones: one graph for every input size.

The backbones keep input sizes symbolic while a graph is captured (see
``vitattn_mm/models/layers/padding.py``), so compiling with
``dynamic=True`` gives a single graph that serves every input size, with no
graph break in the attention modules. :func:`compile_stats` counts what
dynamo did, for the benchmark and the tests.
"""
import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, Optional

import torch
import torch.nn as nn


@dataclass
class CompileStats:
    """What ``torch._dynamo`` did inside a :func:`compile_stats` block."""
    #: Frames (functions) compiled into graphs, recompiles included.
    graphs: int = 0
    #: Compilations of an already compiled frame after a guard failed.
    recompiles: int = 0
    #: Graph breaks, by reason.
    graph_breaks: Dict[str, int] = field(default_factory=dict)
    #: Wall time of the block, compilation and first runs included.
    seconds: float = 0.

    @property
    def num_graph_breaks(self) -> int:
        return sum(self.graph_breaks.values())

    def __str__(self) -> str:
        return (f'{self.graphs} graph(s), {self.recompiles} recompile(s), '
                f'{self.num_graph_breaks} graph break(s), '
                f'{self.seconds:.1f} s')


@contextmanager
def compile_stats(reset: bool = True) -> Iterator[CompileStats]:
    """Count the graphs, recompiles and graph breaks of the code inside.

    Turns on dynamo's recompile log (``torch._logging.set_logs(
    recompiles=True)``, left on: each recompile prints the guard that
    failed) and counts its messages.

    Args:
        reset (bool): Start from an empty dynamo cache, so the first call
            compiles (and is timed) inside the block. Default: True.

    Example:
        >>> compiled = compile_backbone(model, backend='eager')
        >>> with compile_stats() as stats:
        ...     for shape in [(224, 320), (256, 384)]:
        ...         compiled(torch.randn(1, 3, *shape))
        >>> stats.graphs, stats.recompiles
        (1, 0)
    """
    from torch._dynamo.utils import counters
    if reset:
        torch._dynamo.reset()
    counters.clear()
    # Dynamo counts graphs and graph breaks, but reports a recompile only
    # through its 'recompiles' log (which also says which guard failed):
    # turn it on and count its messages.
    torch._logging.set_logs(recompiles=True)
    recompiles = _MessageCounter('Recompiling function')
    logger = logging.getLogger(_RECOMPILES_LOGGER)
    logger.addHandler(recompiles)
    stats = CompileStats()
    start = time.perf_counter()
    try:
        yield stats
    finally:
        stats.seconds = time.perf_counter() - start
        logger.removeHandler(recompiles)
        stats.graphs = counters['stats'].get('unique_graphs', 0)
        stats.recompiles = recompiles.count
        stats.graph_breaks = dict(counters['graph_break'])


#: Where dynamo logs each recompile and the guard that caused it.
_RECOMPILES_LOGGER = 'torch._dynamo.guards.__recompiles'


class _MessageCounter(logging.Handler):
    """Counts log records whose message starts with ``prefix``."""

    def __init__(self, prefix: str):
        super().__init__(logging.DEBUG)
        self.prefix = prefix
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith(self.prefix):
            self.count += 1


def compile_backbone(model: nn.Module,
                     backend: str = 'inductor',
                     dynamic: Optional[bool] = True,
                     mode: Optional[str] = None) -> Callable:
    """``torch.compile(model, dynamic=dynamic, ...)`` with the settings the
    package's backbones are made for.

    Args:
        model (nn.Module): The backbone (or any module).
        backend (str): Dynamo backend: 'inductor' (generated kernels),
            'aot_eager' (autograd graph, no code generation) or 'eager'
            (graph capture only). Default: 'inductor'.
        dynamic (bool, optional): Symbolic input sizes from the first call;
            None lets dynamo decide (it recompiles once, at the second
            size, then goes dynamic). Default: True.
        mode (str, optional): Inductor mode, e.g. 'max-autotune'.
            Default: None.

    Returns:
        nn.Module: The compiled module (sharing ``model``'s parameters).
    """
    kwargs = dict(backend=backend, dynamic=dynamic)
    if mode is not None:
        kwargs['mode'] = mode
    return torch.compile(model, **kwargs)


def compile_test_step(runner) -> bool:
    """Compile ``runner.model.test_step`` as mmengine compiles
    ``train_step`` when the config sets ``compile`` (``True`` or a dict of
    ``torch.compile`` arguments); mmengine's runner compiles only training.
    Call it before ``runner.test()`` / ``runner.val()``.

    Returns:
        bool: Whether it compiled.
    """
    compile_cfg = runner.cfg.get('compile')
    if not compile_cfg:
        return False
    if compile_cfg is True:
        compile_cfg = {}
    runner.model.test_step = torch.compile(runner.model.test_step,
                                           **dict(compile_cfg))
    runner.logger.info(f'test_step compiled with {dict(compile_cfg)}')
    return True


def add_compile_backbone_hook(cfg, backend: str = 'inductor') -> None:
    """Append a :class:`~vitattn_mm.engine.CompileBackboneHook` (dynamic
    shapes, ``backend``) to ``cfg.custom_hooks``: what the tools'
    ``--compile-backbone`` does."""
    hooks = list(cfg.get('custom_hooks', None) or [])
    hooks.append(dict(type='CompileBackboneHook', backend=backend))
    cfg.custom_hooks = hooks
