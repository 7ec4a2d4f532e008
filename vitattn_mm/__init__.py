"""vitattn_mm: efficient vision-transformer attention for OpenMMLab.

Importing the package (configs do it through ``custom_imports``) registers
the backbones into mmdet's, mmseg's and mmpretrain's ``MODELS`` and makes
checkpoint loading weights-only but able to read mmengine's own files.
"""
from .utils.checkpoint import install_safe_checkpoint_loading
from .version import __version__

install_safe_checkpoint_loading()

from . import engine, models  # noqa: E402,F401  (registration side effects)

__all__ = ['__version__']
