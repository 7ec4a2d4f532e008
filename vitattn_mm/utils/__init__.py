"""What configs and models need at run time: weights-only checkpoint
loading and ``torch.compile`` of the backbones. The command-line tools'
helpers live in the separate ``vitattn_tools`` package (``tools/``)."""
from .checkpoint import (InvalidCheckpointError, UnsafeCheckpointError,
                         install_safe_checkpoint_loading)
from .compile import (CompileStats, add_compile_backbone_hook,
                      compile_backbone, compile_stats, compile_test_step)

__all__ = [
    'InvalidCheckpointError', 'UnsafeCheckpointError',
    'install_safe_checkpoint_loading', 'CompileStats', 'compile_backbone',
    'compile_stats', 'compile_test_step', 'add_compile_backbone_hook'
]
