from .compile_hook import CompileBackboneHook
from .hooks import EvaluateBeforeTrainHook
from .optim_wrapper import AutocastOptimWrapper

__all__ = [
    'AutocastOptimWrapper', 'CompileBackboneHook', 'EvaluateBeforeTrainHook'
]
