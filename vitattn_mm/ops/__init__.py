"""Fused attention kernels as custom ops (``torch.ops.vitattn``), each with
its eager composition, a shape function and Triton kernels; and the
``attn_backend`` choice between them (:mod:`.backend`)."""
from .backend import BACKENDS, check_backend, kernels_run_on, uses_fused_op
from .linear_attention import (focused_features,
                               focused_linear_attention_eager,
                               focused_linear_attention_op,
                               relu_linear_attention_eager,
                               relu_linear_attention_op)

__all__ = [
    'BACKENDS', 'check_backend', 'kernels_run_on', 'uses_fused_op',
    'focused_features', 'focused_linear_attention_eager',
    'focused_linear_attention_op', 'relu_linear_attention_eager',
    'relu_linear_attention_op'
]
