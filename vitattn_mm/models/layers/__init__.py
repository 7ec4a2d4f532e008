from .attention import (AttentionState, QueryAttention, TokenAttention,
                        accepts, attention_class, build_attention,
                        merge_heads, pass_on, softmax_attention, split_heads)
from .base_backbone import (Stage, StagedBackbone, check_type, freeze_module,
                            init_linear_and_norm, linear_drop_path_rates,
                            resolve_attn_cfgs)
from .blocks import TransformerBlock, migrate_conv1x1_ffn
from .common import LinspaceOnCPU, check_heads
from .padding import (CornerPadding, CornerPatchEmbed, CornerPatchMerging,
                      grid_after_stride, is_capturing, padded_size)
from .patch_embed import PixelNormPatchEmbed
from .pos_embed import (ResizablePosEmbed, resize_pos_embed,
                        sincos_pos_embed_2d)
from .pretrained import (LoadReport, StateDict, load_pretrained,
                         unwrap_state_dict)
from .windows import (RelativePositionBias, WindowedAttention, crop_tokens,
                      gather_relative_position_bias, pad_to_multiple,
                      relative_position_index, shifted_window_mask,
                      to_2tuple_int, window_mask_bias, window_partition,
                      window_reverse)

__all__ = [
    'AttentionState', 'QueryAttention', 'TokenAttention', 'accepts',
    'pass_on', 'attention_class',
    'build_attention', 'merge_heads', 'softmax_attention', 'split_heads',
    'Stage', 'StagedBackbone', 'check_type', 'freeze_module',
    'init_linear_and_norm', 'linear_drop_path_rates', 'resolve_attn_cfgs',
    'TransformerBlock', 'migrate_conv1x1_ffn', 'LinspaceOnCPU',
    'check_heads', 'CornerPadding', 'CornerPatchEmbed', 'CornerPatchMerging',
    'grid_after_stride', 'is_capturing', 'padded_size',
    'PixelNormPatchEmbed', 'ResizablePosEmbed', 'resize_pos_embed',
    'sincos_pos_embed_2d', 'LoadReport', 'StateDict', 'load_pretrained',
    'unwrap_state_dict', 'RelativePositionBias', 'WindowedAttention',
    'crop_tokens', 'gather_relative_position_bias', 'pad_to_multiple',
    'relative_position_index', 'shifted_window_mask', 'to_2tuple_int',
    'window_mask_bias', 'window_partition', 'window_reverse'
]
