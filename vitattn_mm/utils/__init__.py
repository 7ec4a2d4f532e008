"""What configs and models need at run time: weights-only checkpoint
loading and ``torch.compile`` of the backbones. The command-line tools'
helpers live in the separate ``vitattn_tools`` package (``tools/``)."""
from .checkpoint import (InvalidCheckpointError, UnsafeCheckpointError,
                         allow_checkpoint_types, check_checkpoint_file,
                         load_checkpoint_file)
from .compile import (CompileStats, add_compile_backbone_hook,
                      compile_backbone, compile_stats, compile_test_step)

__all__ = [
    'InvalidCheckpointError', 'UnsafeCheckpointError',
    'allow_checkpoint_types', 'check_checkpoint_file', 'load_checkpoint_file',
    'CompileStats', 'compile_backbone',
    'compile_stats', 'compile_test_step', 'add_compile_backbone_hook'
]
