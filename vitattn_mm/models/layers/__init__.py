from .base_backbone import (VitAttnBackbone, freeze_module, init_linear_and_norm,
                            linear_drop_path_rates)
from .graph_capture import (CornerPadding, is_capturing, padded_size,
                            use_traceable_padding)
from .pos_embed import ResizablePosEmbed, resize_pos_embed
from .pretrained import LoadReport, load_pretrained, unwrap_state_dict
from .windows import (RelativePositionBias, crop_tokens, pad_to_multiple,
                      shifted_window_mask, to_2tuple_int, window_partition,
                      window_reverse)

__all__ = [
    'VitAttnBackbone', 'freeze_module', 'init_linear_and_norm',
    'linear_drop_path_rates', 'CornerPadding', 'is_capturing',
    'padded_size', 'use_traceable_padding', 'ResizablePosEmbed',
    'resize_pos_embed', 'LoadReport', 'load_pretrained', 'unwrap_state_dict',
    'RelativePositionBias', 'crop_tokens', 'pad_to_multiple',
    'shifted_window_mask', 'to_2tuple_int', 'window_partition',
    'window_reverse'
]
