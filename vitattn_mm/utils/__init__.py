"""What configs need at run time beside the models: ``torch.compile`` of
the backbones. (Checkpoint files: :mod:`vitattn_mm.models.checkpoint`. The
command-line tools' helpers live in the separate ``vitattn_tools`` package,
``tools/``.)"""
from .compile import (CompileStats, add_compile_backbone_hook,
                      compile_backbone, compile_stats, compile_test_step)

__all__ = [
    'CompileStats', 'compile_backbone', 'compile_stats', 'compile_test_step',
    'add_compile_backbone_hook'
]
