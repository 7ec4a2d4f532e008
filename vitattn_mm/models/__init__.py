from . import aux_loss  # noqa: F401  (registers the task models)
from .backbones import *  # noqa: F401,F403  (registers the backbones)
