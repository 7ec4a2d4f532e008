"""Auxiliary losses computed inside a backbone, delivered to the trainer.

Some backbones regularise their own internals (LaViT's diagonality-preserving
loss on its attention maps). OpenMMLab models sum every ``loss*`` entry of
the dict their ``loss()`` returns (``BaseModel.parse_losses``), so that is
where such a loss must appear to be logged and back-propagated; mmengine
hooks run outside the backward path and cannot add it.

The protocol has two sides:

* the backbone stores its losses during ``forward``: every
  :class:`~vitattn_mm.models.layers.StagedBackbone` keeps the auxiliary
  losses of its attentions' state (``state.aux_losses()``), in training mode
  with gradients enabled only, so evaluation, ``mode='tensor'`` and FLOP
  counting keep nothing;
* the task model adds ``backbone.pop_aux_losses()`` to its loss dict
  (:class:`AuxLossModelMixin`); popping clears them, so no autograd graph
  outlives the call that built it.

:class:`AuxLossRetinaNet` (mmdet), :class:`AuxLossEncoderDecoder` (mmseg) and
:class:`AuxLossImageClassifier` (mmpretrain) are the stock models with the
mixin. They work with any backbone; one without ``pop_aux_losses`` adds
nothing.

Those three classes are created on first use, not at import: their bases
live in ``mmdet.models`` / ``mmseg.models`` / ``mmpretrain.models``, whose
import loads every detector, segmentor and classifier and needs mmcv's
compiled ops, while ``import vitattn_mm`` (a config's ``custom_imports``)
must not. Each registry holds a small builder under the class's name that
creates the class when a config first builds it; the module attribute
(``from vitattn_mm.models.aux_loss import AuxLossRetinaNet``) returns the
same class, so ``isinstance`` and pickling work as for a plain class.
"""
import functools
from importlib import import_module
from typing import Callable, Dict, List

import torch
import torch.nn as nn
from mmdet.registry import MODELS as MMDET_MODELS
from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS
from mmseg.registry import MODELS as MMSEG_MODELS


def pop_aux_losses(module: nn.Module) -> Dict[str, torch.Tensor]:
    """``module.pop_aux_losses()``, or ``{}`` for modules without it."""
    pop = getattr(module, 'pop_aux_losses', None)
    return pop() if callable(pop) else {}


class AuxLossModelMixin:
    """Adds the backbone's auxiliary losses to a task model's ``loss()``.

    Put it first among the bases: ``class M(AuxLossModelMixin, RetinaNet)``.
    Fits mmdet detectors, mmseg segmentors and mmpretrain classifiers (each
    has a ``backbone`` and computes its losses in ``loss()``). A head loss
    named just ``loss`` (mmpretrain's) becomes ``loss_cls`` when auxiliary
    losses join it, so that the logged ``loss`` is the total that is
    back-propagated.
    """

    def loss(self, *args, **kwargs) -> dict:
        losses = super().loss(*args, **kwargs)
        aux = pop_aux_losses(self.backbone)
        clash = sorted(set(aux) & set(losses))
        if clash:
            raise KeyError(f'backbone auxiliary losses {clash} clash with '
                           'the losses of the heads')
        if aux and 'loss' in losses:
            # mmpretrain's heads return plain `loss`; parse_losses logs the
            # total under that name too, and the head's entry would win.
            losses['loss_cls'] = losses.pop('loss')
        losses.update(aux)
        return losses

    def forward(self, *args, **kwargs):
        try:
            return super().forward(*args, **kwargs)
        finally:
            # predict / tensor calls in training mode: drop what the backbone
            # stored instead of holding its graph until the next loss().
            pop_aux_losses(self.backbone)


#: name -> (registry, module of the stock model, stock class, docstring).
_TASK_MODELS = {
    'AuxLossRetinaNet':
    (MMDET_MODELS, 'mmdet.models.detectors', 'RetinaNet',
     """RetinaNet whose losses include the backbone's auxiliary losses
    (e.g. LaViT's ``loss_dp``). Arguments as ``RetinaNet``."""),
    'AuxLossEncoderDecoder':
    (MMSEG_MODELS, 'mmseg.models.segmentors', 'EncoderDecoder',
     """EncoderDecoder whose losses include the backbone's auxiliary losses
    (e.g. LaViT's ``loss_dp``). Arguments as ``EncoderDecoder``."""),
    'AuxLossImageClassifier':
    (MMPRETRAIN_MODELS, 'mmpretrain.models.classifiers', 'ImageClassifier',
     """ImageClassifier whose losses include the backbone's auxiliary losses
    (e.g. LaViT's ``loss_dp``). Arguments as ``ImageClassifier``."""),
}


@functools.lru_cache(maxsize=None)
def aux_loss_model(name: str) -> type:
    """The task model class ``name`` with :class:`AuxLossModelMixin`,
    created on the first call (importing its stock base) and the same
    class on every later one.

    Args:
        name (str): 'AuxLossRetinaNet', 'AuxLossEncoderDecoder' or
            'AuxLossImageClassifier'.

    Returns:
        type: ``class <name>(AuxLossModelMixin, <stock model>)``.
    """
    _, module, base, doc = _TASK_MODELS[name]
    stock = getattr(import_module(module), base)
    # Module-level name and qualname: pickle finds the class again through
    # this module's __getattr__.
    return type(name, (AuxLossModelMixin, stock),
                dict(__doc__=doc, __module__=__name__, __qualname__=name))


def _lazy_builder(name: str) -> Callable:
    """What the registry holds for ``name``: builds an instance of
    :func:`aux_loss_model` ``(name)`` from a config's arguments."""

    def build(*args, **kwargs):
        return aux_loss_model(name)(*args, **kwargs)

    build.__name__ = build.__qualname__ = name
    build.__doc__ = _TASK_MODELS[name][3]
    return build


for _name, (_registry, *_) in _TASK_MODELS.items():
    _registry.register_module(name=_name, module=_lazy_builder(_name))


def __getattr__(name: str) -> type:
    # PEP 562: `aux_loss.AuxLossRetinaNet` creates the class on first access.
    if name in _TASK_MODELS:
        return aux_loss_model(name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


def __dir__() -> List[str]:
    return sorted(list(globals()) + list(_TASK_MODELS))
