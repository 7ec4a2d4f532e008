"""Registry glue: one class name, visible from mmdet, mmseg and mmpretrain
configs.

OpenMMLab 3.x gives each downstream package its own ``MODELS`` registry, and
a config resolves ``type=...`` in the registry of its ``default_scope``.
Every model class of this plugin is registered into each of the three
registries that is importable, under the same (unique) name, so
``backbone=dict(type='FLattenSwinTransformer')`` works in an mmdet, mmseg or
mmpretrain config alike. A class that follows the packages' differing
conventions registers the variant of each package (``for_package``), so
each config builds its own package's meaning.
"""
import importlib
from typing import List, Tuple

from mmengine.registry import Registry

#: The downstream packages whose ``registry.MODELS`` we register into.
DOWNSTREAM_SCOPES = ('mmdet', 'mmseg', 'mmpretrain')


def downstream_model_registries() -> List[Tuple[str, Registry]]:
    """``(scope, MODELS)`` of every installed downstream package."""
    registries = []
    for scope in DOWNSTREAM_SCOPES:
        try:
            module = importlib.import_module(f'{scope}.registry')
        except ImportError:  # the plugin works with any subset installed
            continue
        registries.append((scope, module.MODELS))
    if not registries:
        raise ImportError('vitattn_mm needs at least one of mmdet, mmseg or '
                          'mmpretrain to be installed.')
    return registries


def register_model(cls=None, *, name=None):
    """Register a model class into every installed downstream ``MODELS``.

    Usable as ``@register_model`` or ``@register_model(name='Alias')``. A
    class with ``for_package(scope)`` registers what that returns in each
    scope's registry (its variant with the package's conventions).

    Args:
        cls (type, optional): The class to register. Default: None (decorator
            factory form).
        name (str, optional): Registry name. Default: ``cls.__name__``.
    """

    def _register(klass):
        for scope, registry in downstream_model_registries():
            variant = klass.for_package(scope) if hasattr(
                klass, 'for_package') else klass
            registry.register_module(name=name or klass.__name__,
                                     module=variant)
        return klass

    return _register if cls is None else _register(cls)


#: Attention modules by name: what a skeleton's ``attn_cfgs`` name by
#: ``type`` (see docs/adding_an_attention.md).
ATTENTIONS = Registry('attention', scope='vitattn_mm')
