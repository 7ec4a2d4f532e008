"""Where one query token looks: attention distributions of each family's
layer beside their softmax counterparts, for ``tools/visualize_attention.py``.

:func:`layer_maps` runs a backbone once on an image, captures the chosen
attention module's input and asks the module where the query token under
``point`` looks (``query_attention``, each attention's own formula, so the
maps follow the implementation); it returns :class:`AttentionMap` s,
distributions over the layer's key grid. The softmax counterparts use the
*same* projections, so a panel pair differs only in the similarity function
(as in the FLatten paper's Fig. 3). How each map is defined is explained in docs/attention_maps.md.
"""
import contextlib
from dataclasses import dataclass
from typing import Callable, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from vitattn_mm.models.attentions import QueryAttention
from vitattn_mm.registry import ATTENTIONS

Grid = Tuple[int, int]


@dataclass
class AttentionMap:
    """One query's distribution over a key grid.

    Args:
        title (str): Panel title.
        weights (Tensor): ``(H_k, W_k)``, non-negative, sums to 1.
        query (tuple[int, int]): (row, col) of the query token on its grid.
        query_grid (tuple[int, int]): Grid of the layer's queries.
        note (str): What the map is, for the caption. Default: ''.
    """
    title: str
    weights: torch.Tensor
    query: Grid
    query_grid: Grid
    note: str = ''


def query_token(point: Sequence[float], image_hw: Grid, grid: Grid) -> Grid:
    """(row, col) of the token of ``grid`` covering pixel ``point`` (x, y)
    of an ``image_hw`` image."""
    x, y = point
    return (min(int(y * grid[0] / image_hw[0]), grid[0] - 1),
            min(int(x * grid[1] / image_hw[1]), grid[1] - 1))


def _reduce_heads(probs: torch.Tensor, head: Optional[int]) -> torch.Tensor:
    """``(heads, N_k)`` rows -> one row: the mean over heads, or one head."""
    row = probs.mean(0) if head is None else probs[head]
    return row / row.sum()


def _to_map(row: torch.Tensor, key_grid: Grid) -> torch.Tensor:
    return row.detach().float().reshape(key_grid).cpu()


@contextlib.contextmanager
def _capture(module: nn.Module, store: dict,
             with_output: bool = False) -> Iterator[None]:
    """Record the positional arguments (and output) of ``module``'s calls."""

    def hook(_, args, *output):
        store['args'] = args
        if with_output:
            store['output'] = output[0]

    handle = (module.register_forward_hook(hook) if with_output else
              module.register_forward_pre_hook(hook))
    try:
        yield
    finally:
        handle.remove()


def _softmax_rows(own: QueryAttention, qi: int,
                  key_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Dot-product softmax over the module's own projections: ``softmax(q_i
    k^T * scale)`` per head, ``(heads, N_k)``."""
    logits = (own.query[:, None] @ own.keys.transpose(-2, -1))[:, 0]
    logits = logits * own.scale
    if key_mask is not None:
        logits = logits.masked_fill(~key_mask, float('-inf'))
    return logits.softmax(-1)


def _window_mask(grid: Grid, query: Grid, window: int) -> torch.Tensor:
    """Keys in the (unshifted, top-left aligned) ``window`` x ``window``
    window that holds the query, as Swin partitions a map."""
    rows = torch.arange(grid[0]) // window == query[0] // window
    cols = torch.arange(grid[1]) // window == query[1] // window
    return (rows[:, None] & cols[None, :]).reshape(-1)


@torch.no_grad()
def layer_maps(model: nn.Module,
               image: torch.Tensor,
               point: Sequence[float],
               layer: str,
               head: Optional[int] = None,
               title: Optional[str] = None,
               note: str = '',
               window: Optional[int] = None) -> List[AttentionMap]:
    """Any registered attention: where the query under ``point`` looks, as
    the module ``layer`` (e.g. ``'stages.0.blocks.0.attn'``) reports it
    (``query_attention``, given the state a stateful one received), and
    dot-product softmax over the same q and k: global and, with ``window``,
    in Swin's ``window`` x ``window`` window.
    """
    attn = model.get_submodule(layer)
    if not hasattr(attn, 'query_attention'):
        raise ValueError(f'{layer} ({type(attn).__name__}) does not report '
                         'its attention (no query_attention method)')
    store = {}
    with _capture(attn, store):
        model(image)
    x, hw, *state = store['args']
    hw = tuple(hw)
    # Every attention is called with the state; only stateful ones read it.
    state = state if type(attn).supports('stateful') and state and \
        state[0] is not None else []
    query = query_token(point, image.shape[-2:], hw)
    qi = query[0] * hw[1] + query[1]
    own = attn.query_attention(x, hw, qi, *state)
    maps = [
        AttentionMap(title or type(attn).__name__, _to_map(
            _reduce_heads(own.weights, head), own.key_hw), query, hw, note),
        AttentionMap('softmax, global (same q, k)', _to_map(
            _reduce_heads(_softmax_rows(own, qi), head), own.key_hw), query,
                     hw),
    ]
    if window and own.key_hw == hw:
        local = _softmax_rows(own, qi, _window_mask(hw, query, window))
        maps.append(
            AttentionMap(f'softmax, {window}x{window} window (same q, k)',
                         _to_map(_reduce_heads(local, head), own.key_hw),
                         query, hw))
    return maps


@torch.no_grad()
def flatten_maps(model: nn.Module, image: torch.Tensor,
                 point: Sequence[float], stage: int = 0, block: int = 0,
                 head: Optional[int] = None,
                 window: int = 7) -> List[AttentionMap]:
    """Focused linear attention of a ``FLattenSwinTransformer`` /
    ``FLattenPVT`` layer, and softmax over the same q and k: global, and in
    Swin's ``window`` x ``window`` window."""
    return layer_maps(
        model, image, point, f'stages.{stage}.blocks.{block}.attn', head,
        'FLatten: focused linear',
        'phi_p(q) phi_p(k)^T / sum; the DWC branch is not an attention '
        'distribution and is left out', window)


def _influence(branch: Callable[[torch.Tensor], torch.Tensor],
               x: torch.Tensor, qi: int, probes: int = 8) -> torch.Tensor:
    """How much each input token moves the query token's output:
    ``E_u ||d(u . y_qi) / d x_j||`` over random unit vectors ``u``."""
    x = x.detach().requires_grad_(True)
    with torch.enable_grad():
        y = branch(x)[0, qi]
        generator = torch.Generator().manual_seed(0)
        total = torch.zeros(x.shape[1])
        for _ in range(probes):
            u = torch.randn(y.shape, generator=generator)
            grad, = torch.autograd.grad(y @ (u / u.norm()), x,
                                        retain_graph=True)
            total += grad[0].norm(dim=-1)
    return total / total.sum()


@torch.no_grad()
def l2vit_maps(model: nn.Module, image: torch.Tensor,
               point: Sequence[float], stage: int = 0,
               block: Optional[int] = None,
               head: Optional[int] = None) -> List[AttentionMap]:
    """Linear global attention of an ``L2ViT`` LGA block without the LCM
    (its weights), and the input influence on the query's output of the
    attention branch alone and of attention + LCM."""
    blocks = model.stages[stage].blocks
    if block is None:  # the stage's first LGA block
        block = next(i for i, b in enumerate(blocks)
                     if hasattr(b, 'local_mp'))
    lga = blocks[block]
    if not hasattr(lga, 'local_mp'):
        raise ValueError(f'block {block} of stage {stage} is a local window '
                         'attention block; pick an LGA (odd) block')
    store, attn_store = {}, {}
    with _capture(lga, store), _capture(lga.attn, attn_store):
        model(image)
    x, hw = store['args'][0], tuple(store['args'][1])
    query = query_token(point, image.shape[-2:], hw)
    qi = query[0] * hw[1] + query[1]

    attn = lga.attn
    weights = attn.query_attention(attn_store['args'][0], hw, qi).weights
    kept = float(weights.sum(-1).mean())
    x = lga.cpe[0](x, hw)

    def attention_branch(t):
        return attn(lga.norm1(t), hw)[0]

    def attention_and_lcm(t):
        # The block's two residual branches (its identity path left out).
        out = attn(lga.norm1(t), hw)[0]
        return out + lga.local_mp(lga.norm3(t + out), hw)

    return [
        AttentionMap(f'L2ViT: linear attention (mass {kept:.2f})', _to_map(
            _reduce_heads(weights, head), hw), query, hw,
                     'relu(q) relu(k)^T / max(sum, 100), shown normalised'),
        AttentionMap('L2ViT: attention branch, input influence',
                     _to_map(_influence(attention_branch, x, qi), hw),
                     query, hw),
        AttentionMap('L2ViT: attention + LCM, input influence',
                     _to_map(_influence(attention_and_lcm, x, qi), hw),
                     query, hw),
    ]


@torch.no_grad()
def msf_maps(model: nn.Module, image: torch.Tensor,
             point: Sequence[float], block: int = 0,
             head: Optional[int] = None) -> List[AttentionMap]:
    """Gaussian-kernel (mean-shift) attention of an ``MSFViT`` block and
    dot-product softmax over the same q and k."""
    layer = f'stages.{block}.blocks.0.attn'
    if not model.get_submodule(layer).mean_shift:
        raise ValueError('the model has softmax attention (mean_shift=False)')
    own, dot = layer_maps(model, image, point, layer, head,
                          'MSF: Gaussian kernel',
                          'softmax(-||q - k||^2 / 2 d^-1/2)')
    dot.title = 'softmax, dot product (same q, k)'
    return [own, dot]


@torch.no_grad()
def lavit_maps(model: nn.Module, image: torch.Tensor,
               point: Sequence[float], stage: Optional[int] = None,
               head: Optional[int] = None) -> List[AttentionMap]:
    """A ``LaViT`` stage's last Vanilla-Attention map and the first
    Less-Attention layer's transformed map that reuses it."""
    less = ATTENTIONS.get('LessAttention')
    if stage is None:  # the first stage with a Less-Attention layer
        stage = next(i for i, s in enumerate(model.stages)
                     if any(isinstance(b.attn, less) for b in s.blocks))
    blocks = model.stages[stage].blocks
    la = next((j for j, b in enumerate(blocks)
               if isinstance(b.attn, less)), None)
    if not la:
        raise ValueError(f'stage {stage} has no Less-Attention layer after '
                         'a Vanilla-Attention one')
    va_store, la_store = {}, {}
    with _capture(blocks[la - 1].attn, va_store, with_output=True), \
            _capture(blocks[la].attn, la_store, with_output=True):
        model(image)
    hw = tuple(va_store['args'][1])
    _, kv_hw = blocks[la].attn.reduce(la_store['args'][0], hw)
    query = query_token(point, image.shape[-2:], hw)
    qi = query[0] * hw[1] + query[1]
    maps = []
    for title, store, note in (
        (f'LaViT: VA layer {la - 1}', va_store, ''),
        (f'LaViT: LA layer {la} (transformed)', la_store,
         'the VA map until trained (identity-initialised transform)'),
    ):
        probs = store['output'][1].scores()[0, :, qi].float().softmax(-1)
        maps.append(
            AttentionMap(title, _to_map(_reduce_heads(probs, head),
                                        tuple(kv_hw)), query, hw, note))
    return maps


@torch.no_grad()
def attention_row(name: str, image: torch.Tensor, point: Sequence[float],
                  head: Optional[int] = None,
                  seed: int = 0) -> List[AttentionMap]:
    """The registered attention ``name`` in a plain ViT (192 channels, 4
    heads, 3 blocks, placed by its ``layer_plan``): where the query looks
    in the last block, and dot-product softmax over the same q and k. Any
    attention registered in ``ATTENTIONS`` is drawn so, with no list to
    edit."""
    from vitattn_mm.models.backbones import AttnViT
    cls = ATTENTIONS.get(name)
    torch.manual_seed(seed)
    model = AttnViT(
        arch=dict(embed_dims=192, depth=3, num_heads=4),
        attn_cfgs=cls.layer_plan([1, 1, 1]), with_cls_token=False,
        out_type='featmap', patch_size=8).eval()
    return layer_maps(model, image, point, 'stages.2.blocks.0.attn', head,
                      name)
