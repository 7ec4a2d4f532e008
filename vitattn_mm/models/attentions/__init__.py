"""Every registered attention, one file each, behind one protocol
(:mod:`.base`): ``out, state = attn(x, hw_shape, state)``."""
from .base import (AttentionState, QueryAttention, TokenAttention, accepts,
                   attention_class, build_attention, pass_on)
from .cross_shaped import CrossShapedWindowAttention
from .focused_linear import FocusedLinearAttention
from .functional import (check_heads, masked_softmax, merge_heads,
                         softmax_attention, softmax_query, split_heads)
from .less_attention import LessAttention, VanillaAttention
from .linear_global import LinearGlobalAttention, LocalConcentrationModule
from .mean_shift import GroupedLinear, MeanShiftAttention
from .multihead import MultiheadSelfAttention
from .spatial_reduction import SpatialReduction, SpatialReductionAttention
from .window_msa import WindowMSA
from .windowed import WindowedAttention

__all__ = [
    'AttentionState', 'QueryAttention', 'TokenAttention', 'accepts',
    'attention_class', 'build_attention', 'pass_on',
    'CrossShapedWindowAttention', 'FocusedLinearAttention', 'check_heads',
    'masked_softmax', 'merge_heads', 'softmax_attention', 'softmax_query',
    'split_heads', 'LessAttention', 'VanillaAttention',
    'LinearGlobalAttention', 'LocalConcentrationModule', 'GroupedLinear',
    'MeanShiftAttention', 'MultiheadSelfAttention', 'SpatialReduction',
    'SpatialReductionAttention', 'WindowMSA', 'WindowedAttention'
]
