from typing import Dict, Optional

from mmengine.hooks import Hook
from mmengine.registry import HOOKS


@HOOKS.register_module()
class EvaluateBeforeTrainHook(Hook):
    """Run the validation loop once before the first training iteration.

    Gives the untrained (freshly initialised) model's metrics on the same
    validation split, the baseline a short run is compared against. The
    metrics are logged and kept in ``runner.message_hub`` under
    ``'metrics_before_train'``. Skipped when resuming.
    """

    priority = 'LOWEST'  # after weights are initialised / loaded

    def __init__(self):
        self.metrics: Optional[Dict[str, float]] = None

    def before_train(self, runner) -> None:
        if runner.iter > 0:
            return
        runner.logger.info('Evaluating the untrained model first.')
        self.metrics = runner.val_loop.run()
        runner.message_hub.update_info('metrics_before_train', self.metrics)
