"""Where VA and LA layers go: the attention configs of a Less-Attention
network."""
from typing import List, Optional, Sequence, Union

from ...layers.common import to_2tuple_int


def less_attention_layers(depths: Sequence[int],
                          la_start: Sequence[int],
                          vanilla: Union[dict, Sequence[Sequence[dict]]],
                          less: Union[dict, Sequence[Sequence[dict]]],
                          residual: Optional[Sequence[Optional[dict]]] = None
                          ) -> List[List[dict]]:
    """The attention config of every block of a Less-Attention backbone.

    Per stage, VA layers (``vanilla``) up to the first LA layer
    ``la_start`` (1-based; 0: none), then LA layers (``less``); each may be
    one dict or, per stage, a list with one per block (e.g. window configs
    whose inner attention is a VA / LA layer: their keys go to it). A VA
    layer keeps its logits when an LA layer or the next stage's Attention
    Residual reuses them; the first VA layer of stage ``i`` gets
    ``residual[i]`` (None: none).
    """
    num_stages = len(depths)
    residual = list(residual or [None] * num_stages)
    for i, start in enumerate(la_start):
        if start != 0 and not 2 <= start <= depths[i]:
            raise ValueError(
                f'la_start[{i}] = {start}: the first LA layer of a stage is '
                f'layer 2..{depths[i]} (1-based), or 0 for none')
    cfgs = []
    for i, (depth, start) in enumerate(zip(depths, la_start)):
        va = [vanilla] * depth if isinstance(vanilla, dict) else vanilla[i]
        la = [less] * depth if isinstance(less, dict) else less[i]
        layers = []
        for j in range(depth):
            if start and j + 1 >= start:
                layers.append(dict(la[j]))
                continue
            next_is_la = bool(start) and j + 2 >= start and j + 1 < depth
            feeds_residual = (j + 1 == depth and i + 1 < num_stages
                              and residual[i + 1] is not None)
            # An LA layer next, or Swin's window residual, reads the whole
            # map; PVT's residual halves the queries before their product
            # with the keys, so the map is never built.
            reads_map = next_is_la or feeds_residual and \
                residual[i + 1].get('type') == 'window'
            keep = True if reads_map else (
                'factors' if feeds_residual else False)
            layer = dict(va[j], keep_logits=keep)
            if j == 0 and residual[i] is not None:
                layer['residual'] = dict(residual[i])
            layers.append(layer)
        cfgs.append(layers)
    return cfgs


def less_attention_cfg(la_transform: str, la_kernel_size: int,
                       input_size, dp_loss_weight: float,
                       dp_loss_form: str = 'bounded', **kwargs) -> dict:
    """The LA layer config of a backbone's ``la_transform`` /
    ``la_kernel_size`` / ``dp_loss_weight`` / ``dp_loss_form``
    arguments."""
    if la_transform == 'conv':
        transform = dict(type='conv', kernel_size=la_kernel_size)
    elif la_transform == 'dense':
        transform = dict(type='dense', input_size=to_2tuple_int(input_size))
    else:
        raise ValueError("la_transform must be 'conv' or 'dense', got "
                         f'{la_transform!r}')
    return dict(type='LessAttention', transform=transform,
                dp_loss_weight=dp_loss_weight, dp_loss_form=dp_loss_form,
                **kwargs)


def attention_residuals(kind: str, num_heads: Sequence[int],
                        layer_scale_init: float) -> List[Optional[dict]]:
    """The Attention Residual of every stage's first VA layer (none in the
    first stage): ``kind`` 'conv' (PVT) or 'window' (Swin), from the
    previous stage's heads."""
    return [None] + [
        dict(type=kind, in_heads=num_heads[i - 1],
             layer_scale_init=layer_scale_init)
        for i in range(1, len(num_heads))
    ]
