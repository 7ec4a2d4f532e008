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
"""
from typing import Dict

import torch
import torch.nn as nn
from mmdet.models.detectors import RetinaNet
from mmdet.registry import MODELS as MMDET_MODELS
from mmpretrain.models.classifiers import ImageClassifier
from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS
from mmseg.models.segmentors import EncoderDecoder
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


@MMDET_MODELS.register_module()
class AuxLossRetinaNet(AuxLossModelMixin, RetinaNet):
    """RetinaNet whose losses include the backbone's auxiliary losses
    (e.g. LaViT's ``loss_dp``). Arguments as ``RetinaNet``."""


@MMSEG_MODELS.register_module()
class AuxLossEncoderDecoder(AuxLossModelMixin, EncoderDecoder):
    """EncoderDecoder whose losses include the backbone's auxiliary losses
    (e.g. LaViT's ``loss_dp``). Arguments as ``EncoderDecoder``."""


@MMPRETRAIN_MODELS.register_module()
class AuxLossImageClassifier(AuxLossModelMixin, ImageClassifier):
    """ImageClassifier whose losses include the backbone's auxiliary losses
    (e.g. LaViT's ``loss_dp``). Arguments as ``ImageClassifier``."""
