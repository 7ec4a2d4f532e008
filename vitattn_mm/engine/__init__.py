from ..models.checkpoint.guard import CheckpointCheckHook
from .compile_hook import CompileBackboneHook
from .hooks import EvaluateBeforeTrainHook, RandomStateHook
from .optim_wrapper import AutocastOptimWrapper

__all__ = [
    'AutocastOptimWrapper', 'CheckpointCheckHook', 'CompileBackboneHook',
    'EvaluateBeforeTrainHook', 'RandomStateHook'
]
