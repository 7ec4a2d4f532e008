from .hooks import EvaluateBeforeTrainHook, RandomStateHook
from .optim_wrapper import AutocastOptimWrapper

__all__ = [
    'AutocastOptimWrapper', 'EvaluateBeforeTrainHook', 'RandomStateHook'
]
