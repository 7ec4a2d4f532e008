"""Which OpenMMLab task a config belongs to, read from its default scope.

Its own module because both the demo-config rewriter and the launcher
helpers (which build demo runs) need it; neither has to import the other.
"""
from mmengine.config import Config

#: default_scope -> task name used by the tools.
TASKS = {'mmdet': 'detection', 'mmseg': 'segmentation',
         'mmpretrain': 'classification'}


def task_of(cfg: Config) -> str:
    """'detection', 'segmentation' or 'classification' from the scope.

    Args:
        cfg (Config): An mmdet, mmseg or mmpretrain config.

    Returns:
        str: The task name.
    """
    scope = cfg.get('default_scope')
    if scope not in TASKS:
        raise ValueError(
            f"config default_scope is {scope!r}; vitattn_mm tools handle "
            f"{sorted(TASKS)}. Inherit an mmdet::, mmseg:: or mmpretrain:: "
            'base config (they set it).')
    return TASKS[scope]
