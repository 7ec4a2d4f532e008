"""Shared building blocks of the skeletons: padding, patch embeddings,
position tables, windows and the transformer block."""
from .blocks import ConvFFN, TransformerBlock
from .common import (InvalidArch, InvalidArgument, LinspaceOnCPU,
                     nchw_to_nlc, nlc_to_nchw, to_2tuple_int)
from .padding import (CornerPadding, CornerPatchEmbed, CornerPatchMerging,
                      grid_after_stride, pad_corner, padded_size)
from .patch_embed import PixelNormPatchEmbed
from .pos_embed import (ResizablePosEmbed, resize_loaded_pos_embed,
                        resize_pos_embed, sincos_pos_embed_2d)
from .windows import (RelativePositionBias, add_relative_position_bias,
                      crop_tokens, pad_to_multiple, relative_position_bias,
                      relative_position_index, shifted_window_mask,
                      window_partition, window_reverse)

__all__ = [
    'ConvFFN', 'TransformerBlock', 'InvalidArch', 'InvalidArgument',
    'LinspaceOnCPU', 'nchw_to_nlc', 'nlc_to_nchw', 'CornerPadding',
    'CornerPatchEmbed', 'CornerPatchMerging',
    'grid_after_stride', 'pad_corner', 'padded_size', 'PixelNormPatchEmbed',
    'ResizablePosEmbed', 'resize_loaded_pos_embed', 'resize_pos_embed',
    'sincos_pos_embed_2d', 'RelativePositionBias',
    'add_relative_position_bias', 'crop_tokens', 'pad_to_multiple',
    'relative_position_bias', 'relative_position_index',
    'shifted_window_mask', 'to_2tuple_int', 'window_partition',
    'window_reverse'
]
