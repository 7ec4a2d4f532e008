from .checkpoint import (UnsafeCheckpointError,
                         install_safe_checkpoint_loading)
from .runtime import adapt_to_device, enable_amp, setup_launcher, task_of

__all__ = [
    'UnsafeCheckpointError', 'install_safe_checkpoint_loading', 'task_of',
    'setup_launcher', 'enable_amp', 'adapt_to_device'
]
