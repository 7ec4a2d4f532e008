"""vitattn_mm: efficient vision-transformer attention for OpenMMLab.

Importing the package (configs do it through ``custom_imports``) registers
the backbones into mmdet's, mmseg's and mmpretrain's ``MODELS`` and adds the
data types of mmengine's own checkpoints to torch's weights-only allowlist,
so ``load_from`` and ``resume`` read them (no loader is patched).
"""
from .models.checkpoint.files import allow_checkpoint_types
from .version import __version__

allow_checkpoint_types()

from . import engine, models  # noqa: E402,F401  (registration side effects)

__all__ = ['__version__']
