"""Fused attention kernels as custom ops (``torch.ops.vitattn``), each with
its eager composition, a shape function and Triton kernels; and the
``attn_backend`` choice between them (:mod:`.backend`)."""
from .backend import (BACKENDS, check_backend, eager_attention,
                      kernels_run_on, uses_fused_op)
from .diagonality_loss import (MAX_SIDE, diagonality_loss_eager,
                               diagonality_loss_op, diagonality_terms,
                               pool_queries, pool_queries_in_passing,
                               pooled_diagonality_loss_eager,
                               pooled_probabilities,
                               pooled_diagonality_loss_op, pooled_op_serves,
                               pooled_op_takes)
from .focusing import focused_features
from .linear_attention import (focused_linear_attention_eager,
                               focused_linear_attention_op,
                               focused_linear_attention_with_sums,
                               relu_linear_attention_eager,
                               relu_linear_attention_op,
                               relu_linear_attention_with_sums)
from .mean_shift_attention import (key_norm_logits,
                                   mean_shift_attention_eager,
                                   mean_shift_attention_op,
                                   mean_shift_attention_with_lse,
                                   split_parts)
from .score_conv import score_conv_eager, score_conv_op
from .softmax_apply import (apply_probabilities, softmax_apply_dp_eager,
                            softmax_apply_dp_op, softmax_apply_eager,
                            softmax_apply_op, softmax_apply_passing_on,
                            softmax_apply_with_dp_loss,
                            softmax_apply_with_lse)

__all__ = [
    'BACKENDS', 'check_backend', 'eager_attention', 'kernels_run_on',
    'uses_fused_op',
    'focused_features', 'focused_linear_attention_eager',
    'focused_linear_attention_op', 'focused_linear_attention_with_sums',
    'relu_linear_attention_eager', 'relu_linear_attention_op',
    'relu_linear_attention_with_sums', 'mean_shift_attention_eager',
    'mean_shift_attention_op', 'mean_shift_attention_with_lse',
    'key_norm_logits', 'split_parts',
    'score_conv_eager', 'score_conv_op', 'apply_probabilities',
    'softmax_apply_eager', 'softmax_apply_op', 'softmax_apply_with_lse',
    'softmax_apply_dp_eager', 'softmax_apply_dp_op',
    'softmax_apply_passing_on', 'softmax_apply_with_dp_loss',
    'MAX_SIDE',
    'diagonality_loss_eager', 'diagonality_loss_op', 'diagonality_terms',
    'pool_queries', 'pool_queries_in_passing',
    'pooled_diagonality_loss_eager', 'pooled_probabilities',
    'pooled_diagonality_loss_op', 'pooled_op_serves', 'pooled_op_takes'
]
