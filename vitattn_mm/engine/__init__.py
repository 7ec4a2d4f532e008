from .checkpoint_check import CheckpointCheckHook
from .hooks import EvaluateBeforeTrainHook, RandomStateHook
from .optim_wrapper import AutocastOptimWrapper

__all__ = [
    'AutocastOptimWrapper', 'CheckpointCheckHook', 'EvaluateBeforeTrainHook',
    'RandomStateHook'
]
