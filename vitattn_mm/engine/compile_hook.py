"""Compile the backbone only, for training and testing alike."""
from typing import Optional

import torch
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
from mmengine.registry import HOOKS


@HOOKS.register_module()
class CompileBackboneHook(Hook):
    """``torch.compile`` the model's backbone before the run starts.

    mmengine's ``compile`` setting compiles the whole ``train_step``, where
    the heads and data preprocessors of detectors and segmentors break the
    graph many times and tracing them takes long; the package's backbones
    compile into one graph for every input size (see docs/deployment.md).
    This hook compiles ``backbone.forward`` only, for training, validation
    and testing; the parameters and checkpoint keys are unchanged.

    Args:
        backend (str): Dynamo backend ('inductor', 'aot_eager', 'eager').
            Default: 'inductor'.
        dynamic (bool, optional): Symbolic input sizes. Default: True.
        mode (str, optional): Inductor mode. Default: None.

    Example:
        >>> custom_hooks = [dict(type='CompileBackboneHook')]
    """

    priority = 'VERY_LOW'

    def __init__(self,
                 backend: str = 'inductor',
                 dynamic: Optional[bool] = True,
                 mode: Optional[str] = None):
        self.kwargs = dict(backend=backend, dynamic=dynamic)
        if mode is not None:
            self.kwargs['mode'] = mode

    def before_run(self, runner) -> None:
        model = runner.model.module if is_model_wrapper(
            runner.model) else runner.model
        backbone = getattr(model, 'backbone', None)
        if backbone is None:
            raise AttributeError(f'{type(model).__name__} has no backbone '
                                 'for CompileBackboneHook to compile')
        # An instance attribute: state_dict keys stay as they are.
        backbone.forward = torch.compile(backbone.forward, **self.kwargs)
        runner.logger.info(f'backbone compiled with {self.kwargs}')
