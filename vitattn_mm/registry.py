"""Registry glue: one class, visible from mmdet, mmseg and mmpretrain configs.

OpenMMLab 3.x gives each downstream package its own ``MODELS`` registry, and a
config resolves ``type=...`` in the registry of its ``default_scope``. Rather
than inventing a fourth scope, every model class of this plugin is registered
into each of the three registries that is importable, under the same (unique)
name, so ``backbone=dict(type='FLattenSwinTransformer')`` works in an mmdet,
mmseg or mmpretrain config alike.
"""
import importlib
from typing import List

from mmengine.registry import Registry

#: The downstream packages whose ``registry.MODELS`` we register into.
DOWNSTREAM_SCOPES = ('mmdet', 'mmseg', 'mmpretrain')


def _downstream_model_registries() -> List[Registry]:
    registries = []
    for scope in DOWNSTREAM_SCOPES:
        try:
            module = importlib.import_module(f'{scope}.registry')
        except ImportError:  # the plugin works with any subset installed
            continue
        registries.append(module.MODELS)
    if not registries:
        raise ImportError('vitattn_mm needs at least one of mmdet, mmseg or '
                          'mmpretrain to be installed.')
    return registries


def register_model(cls=None, *, name=None):
    """Register a model class into every installed downstream ``MODELS``.

    Usable as ``@register_model`` or ``@register_model(name='Alias')``.

    Args:
        cls (type, optional): The class to register. Default: None (decorator
            factory form).
        name (str, optional): Registry name. Default: ``cls.__name__``.
    """

    def _register(klass):
        for registry in _downstream_model_registries():
            registry.register_module(name=name or klass.__name__,
                                     module=klass)
        return klass

    return _register if cls is None else _register(cls)


#: Attention modules by name: what a skeleton's ``attn_cfgs`` name by
#: ``type``. Token attentions (``forward(x, hw_shape)``) and window
#: attentions (``forward(windows, mask=None)``, run inside mmpretrain's
#: ``ShiftWindowMSA``) both live here; see docs/adding_an_attention.md.
ATTENTIONS = Registry('attention', scope='vitattn_mm')
