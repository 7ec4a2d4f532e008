"""Less-Attention (LaViT): VA layers that keep their attention logits, LA
layers that transform them instead of computing ``Q K^T``, the Attention
Residual across stages and the Diagonality-Preserving loss.

Zhang et al., "You Only Need Less Attention at Each Stage in Vision
Transformers", CVPR 2024 (https://arxiv.org/abs/2406.00427). No official
code exists; this is our reading of the paper, made to serve dense
prediction (see ``docs/lavit.md`` for every decision and deviation). The
layers are stateful attentions of the protocol, so they plug into every
skeleton (PVT, ViT, Swin in windows, CSwin, L2ViT), and the skeleton hands
the state's ``loss_dp`` to the task model.
"""
from .layers import LessAttention, VanillaAttention
from .loss import (DP_LOSS_FORMS, diagonality_preserving_loss,
                   paper_diagonality_loss)
from .plan import (attention_residuals, less_attention_cfg,
                   less_attention_layers)
from .residual import (AttentionResidual, WindowAttentionResidual,
                       build_attention_residual)
from .state import LessAttentionState, as_less_attention_state
from .transforms import (ConvAttentionTransform, DenseAttentionTransform,
                         build_attention_transform)

__all__ = [
    'LessAttention', 'VanillaAttention', 'DP_LOSS_FORMS',
    'diagonality_preserving_loss', 'paper_diagonality_loss',
    'attention_residuals', 'less_attention_cfg', 'less_attention_layers',
    'AttentionResidual', 'WindowAttentionResidual',
    'build_attention_residual', 'LessAttentionState',
    'as_less_attention_state', 'ConvAttentionTransform',
    'DenseAttentionTransform', 'build_attention_transform'
]
