from .checkpoint import (UnsafeCheckpointError,
                         install_safe_checkpoint_loading)
from .runtime import enable_amp, setup_launcher, task_of

__all__ = [
    'UnsafeCheckpointError', 'install_safe_checkpoint_loading', 'task_of',
    'setup_launcher', 'enable_amp'
]
