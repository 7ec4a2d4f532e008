from .attention import QueryAttention, split_heads
from .base_backbone import (VitAttnBackbone, freeze_module, init_linear_and_norm,
                            linear_drop_path_rates)
from .blocks import (TransformerBlock, attention_class, build_attention,
                     migrate_conv1x1_ffn, per_block_attention,
                     per_stage_attention)
from .common import LinspaceOnCPU, check_heads, grid_after_stride
from .graph_capture import (CornerPadding, is_capturing, padded_size,
                            use_traceable_padding)
from .patch_embed import PixelNormPatchEmbed
from .pos_embed import (ResizablePosEmbed, resize_pos_embed,
                        sincos_pos_embed_2d)
from .pretrained import (LoadReport, StateDict, load_pretrained,
                         unwrap_state_dict)
from .windows import (RelativePositionBias, crop_tokens, pad_to_multiple,
                      shifted_window_mask, to_2tuple_int, window_partition,
                      window_reverse)

__all__ = [
    'QueryAttention', 'split_heads', 'VitAttnBackbone', 'freeze_module',
    'init_linear_and_norm', 'linear_drop_path_rates', 'TransformerBlock',
    'attention_class', 'build_attention', 'migrate_conv1x1_ffn',
    'per_block_attention', 'per_stage_attention',
    'LinspaceOnCPU', 'check_heads', 'grid_after_stride', 'CornerPadding',
    'is_capturing', 'padded_size', 'use_traceable_padding',
    'PixelNormPatchEmbed', 'ResizablePosEmbed', 'resize_pos_embed',
    'sincos_pos_embed_2d', 'LoadReport', 'StateDict', 'load_pretrained',
    'unwrap_state_dict', 'RelativePositionBias', 'crop_tokens',
    'pad_to_multiple', 'shifted_window_mask', 'to_2tuple_int',
    'window_partition', 'window_reverse'
]
