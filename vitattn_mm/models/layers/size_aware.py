"""Size-aware primitives that decide themselves how a captured graph computes
them (the convolutions over token counts of Less-Attention's transform,
an attention bias's row alignment; the position-table resize is in
:mod:`.pos_embed`).

ONNX export and ``torch.compile`` record one graph that must serve every
input size. The padding primitives (:mod:`.padding`) serve it by always
padding; the convolutions here would have a graph freeze a size-dependent
choice (a group count, the convolution backend picked by the input's
size), so they take another, equal route while one is captured. No model
code asks whether a graph is captured: it calls these (and
:func:`~.pos_embed.resize_pos_embed`).
"""
import torch
import torch.nn.functional as F


def capturing() -> bool:
    """Whether a graph that must serve other input sizes is being captured
    (ONNX export, ``torch.compile``); a plain trace (the FLOP counter's)
    records what eager mode computes at its one size."""
    return torch.onnx.is_in_onnx_export() or torch.compiler.is_compiling()


def token_depthwise_conv(x: torch.Tensor, weight: torch.Tensor,
                         maps_last: bool = False) -> torch.Tensor:
    """Convolve each head's maps with the head's ``k x k`` kernel, where the
    maps are as many as a token count (Less-Attention's score maps: one
    image of the key grid per query, of the query grid per key).

    Args:
        x (Tensor): ``(B, heads, T, H, W)``: ``T`` maps per head; with
            ``maps_last``, ``(B, heads, H, W, T)``.
        weight (Tensor): ``(heads, 1, k, k)``; zero padding ``k // 2``.
        maps_last (bool): Whether the maps are the last dimension (a
            head's ``(N_q, N_k)`` scores as ``N_k`` images of the query
            grid, read in place). Default: False.

    Returns:
        Tensor: ``x``'s shape.

    On the CPU, maps first, one depthwise conv whose channels are every
    head's maps, the head's kernel repeated over them (a view of it for
    one head, whose maps may be channels-last): the CPU's fastest conv
    (3-6x the others measured). Elsewhere, and while a graph is captured,
    the maps are a depth of a 3-D conv grouped by head with the static
    ``1 x k x k`` (``k x k x 1`` maps last) kernels: the same result, in
    the layout ``x`` has (no transposes, no repeated kernel), and no group
    count that follows the input size (ONNX's is an attribute, and
    ``torch.compile`` would recompile per size).
    """
    pad = weight.shape[-1] // 2
    if maps_last or x.device.type != 'cpu' or capturing():
        if maps_last:
            weight, padding = weight[..., None], (pad, pad, 0)
        else:
            weight, padding = weight[:, :, None], (0, pad, pad)
        return F.conv3d(x, weight, padding=padding, groups=weight.shape[0])
    B, heads, maps, H, W = x.shape
    k = weight.shape[-1]
    per_map = weight[:, None].expand(heads, maps, 1, k, k).reshape(
        heads * maps, 1, k, k)
    # One head's maps by select: a reshape of a batch of one may give the
    # batch a stride that hides a channels-last layout from the conv.
    maps_of = x.select(1, 0) if heads == 1 else x.reshape(B, heads * maps,
                                                           H, W)
    out = F.conv2d(maps_of, per_map, padding=pad, groups=heads * maps)
    return out.view(B, heads, maps, H, W)


def token_pointwise_conv(x: torch.Tensor, weight: torch.Tensor
                         ) -> torch.Tensor:
    """A 1x1 conv (``weight``: ``(C_out, C_in, 1, 1)``, no bias) over an
    NCHW map whose sides are token counts (Less-Attention's head mix over
    ``N_q x N_k`` scores).

    Eagerly the conv (mkldnn's pointwise kernel, counted as a convolution
    by the FLOP counter). A graph would freeze the backend the conv picks
    by the input's size, so while one is captured it is the equal batched
    matrix product over the channels.
    """
    if capturing():
        B, C, H, W = x.shape
        mix = weight[:, :, 0, 0].expand(B, -1, -1)
        return torch.bmm(mix, x.reshape(B, C, H * W)).view(B, -1, H, W)
    return F.conv2d(x, weight)


#: Row alignment (elements) of an additive mask that the fused GPU kernel
#: (memory-efficient attention) reads in place; it pads others first.
MASK_ALIGNMENT = 16


def aligned_rows(bias: torch.Tensor) -> torch.Tensor:
    """``bias`` padded with columns up to ``MASK_ALIGNMENT`` (slice them off
    for the values): padded at the size it has, not inside the fused kernel
    after it has been broadcast to the whole batch.

    Unchanged on the CPU (whose kernels need no alignment; the padding
    would be a copy of the whole bias) and, eagerly, where its rows are
    aligned already (or broadcast); elsewhere, while a graph is captured,
    always padded (by zero columns where none are needed), since whether a
    row is aligned follows the input size.
    """
    if bias.dim() < 2 or bias.device.type == 'cpu':
        return bias
    if not capturing() and bias.stride(-2) % MASK_ALIGNMENT == 0:
        return bias
    return F.pad(bias, (0, -bias.shape[-1] % MASK_ALIGNMENT))


def aligned_keys(keys: torch.Tensor) -> torch.Tensor:
    """``(..., N_k, d)`` keys with zero rows up to ``MASK_ALIGNMENT``: a map
    computed from them, its columns sliced back to ``N_k``, is a mask whose
    rows :func:`aligned_rows` takes as they are, written aligned once
    instead of copied into padding.

    Unchanged where :func:`aligned_rows` copies nothing or always pads: on
    the CPU, and while a graph is captured.
    """
    if keys.device.type == 'cpu' or capturing():
        return keys
    return F.pad(keys, (0, 0, 0, -keys.shape[-2] % MASK_ALIGNMENT))
