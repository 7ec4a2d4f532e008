"""The attention protocol: how every registered attention is built, called
and asked where it looks.

Every attention in :data:`~vitattn_mm.registry.ATTENTIONS` is a
:class:`TokenAttention`. Built by a skeleton with :func:`build_attention`
(``embed_dims``, ``num_heads``, ``qkv_bias`` and, to those whose
constructor takes them, what the skeleton knows: the stage's pretraining
grid ``grid_size``, its ``sr_ratio``...), it is called on ``(B, N, C)``
tokens laid out on an ``(H, W)`` grid, always the same way::

    out, state = attn(x, hw_shape, state)

and returns tokens of the same shape with the state it hands on. ``N`` is
``H * W``; attentions that are ``grid_free`` also take leading extra tokens
(a class token).

* ``state`` is an explicit :class:`AttentionState` (or None). Most
  attentions hand it on untouched; ``stateful`` ones read and replace it
  (Less-Attention passes attention logits from layer to layer and stage to
  stage). Skeletons thread it through every block and hand
  ``state.aux_losses()`` to the task model; they know nothing else of it.
* Inside shifted windows the window wrapper
  (:class:`~vitattn_mm.models.attentions.WindowedAttention`) also passes
  Swin's additive ``(num_windows, N, N)`` shift mask as ``mask=`` to
  attentions that ``takes_mask`` (softmax attentions); it refuses to shift
  the others.
* ``query_attention(x, hw_shape, index[, state])`` returns a
  :class:`QueryAttention`: the weights the module mixes query ``index``'s
  values with, from the module's own formula (the attention-map tool draws
  it; no other file re-derives a family's formula).

The capability flags are class attributes; where one depends on a
constructor argument (a spatial reduction makes an attention grid-bound
and its keys no longer the window's), :meth:`TokenAttention.supports`
answers from the config, before anything is built, and
:meth:`TokenAttention.refusal` says why not.
"""
import inspect
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmengine.model import BaseModule

from ...registry import ATTENTIONS

Grid = Tuple[int, int]
#: What every attention's forward returns.
AttentionOutput = Tuple[torch.Tensor, Optional['AttentionState']]

#: The capability flags of the protocol, and what lacking each means.
CAPABILITIES = dict(
    stateful='keeps no state for the layers after it',
    takes_mask='takes no additive mask (it forms no softmax over its '
    "keys)",
    grid_free='takes no tokens beyond the grid (no class token)')


@dataclass
class QueryAttention:
    """Where one query token looks, as the attention module computes it.

    Returned by ``attn.query_attention(x, hw_shape, index)``, for the first
    image of ``x`` (the module's input).

    Args:
        weights (Tensor): ``(heads, N_k)``: the weights the module mixes the
            values with for this query (rows sum to 1, or less where the
            module's normaliser is clamped, e.g. L2ViT's).
        key_hw (tuple[int, int]): Grid of the ``N_k`` keys.
        query (Tensor): ``(heads, d)``: the query's projected features.
        keys (Tensor): ``(heads, N_k, d)``: the keys' projected features
            (positional encodings included), so a dot-product softmax over
            the same projections can be drawn beside ``weights``.
        scale (float): Scale of that dot-product softmax (``d ** -0.5``).
    """
    weights: torch.Tensor
    key_hw: Grid
    query: torch.Tensor
    keys: torch.Tensor
    scale: float


class AttentionState:
    """What a stateful attention passes to the next layers.

    The base says only what a skeleton may ask of a state: the auxiliary
    losses it carries (a training pass hands them to the task model), and
    that it is being passed through windows (the window wrapper tells it
    how many windows each image was cut into).
    """

    def aux_losses(self) -> Dict[str, torch.Tensor]:
        """Losses to add to the task model's (e.g. Less-Attention's
        ``loss_dp``); none by default."""
        return {}

    def in_windows(self, windows_per_image: int) -> 'AttentionState':
        """This state as left by an attention that ran in windows, each
        image cut into ``windows_per_image``."""
        return self


#: What a linear attention cannot honour.
NO_ATTENTION_WEIGHTS = dict(
    attn_drop='a linear attention forms no attention weights to drop')


class TokenAttention(BaseModule):
    """Base class of every registered attention (see the module docstring).

    Class attributes say how an attention may be called:

    * ``stateful``: it reads and replaces the state (others hand it on).
    * ``takes_mask``: ``forward`` accepts ``mask=``, an additive
      ``(num_windows, N, N)`` bias for windows batched image-major, so it
      can run in shifted windows.
    * ``grid_free``: ``x`` may hold leading tokens beyond the ``H * W``
      grid (a class token), which the attention treats like the others.
    """

    stateful: bool = False
    takes_mask: bool = False
    grid_free: bool = False
    #: Why it takes no argument a skeleton may hand on (a stock keyword
    #: such as ``attn_drop``): ``{argument: reason}``, said in the error
    #: (e.g. :data:`NO_ATTENTION_WEIGHTS`).
    unsupported: Dict[str, str] = {}

    @classmethod
    def supports(cls, capability: str, cfg: Optional[dict] = None) -> bool:
        """Whether an instance built from ``cfg`` (its constructor
        arguments) has ``capability`` (see :meth:`refusal`)."""
        return cls.refusal(capability, cfg) is None

    @classmethod
    def refusal(cls, capability: str,
                cfg: Optional[dict] = None) -> Optional[str]:
        """Why an instance built from ``cfg`` lacks ``capability`` (None:
        it has it): the class attribute says, unless a constructor argument
        decides it (a subclass overrides this with the reason)."""
        if capability not in CAPABILITIES:
            raise ValueError(f'capability must be one of '
                             f'{tuple(CAPABILITIES)}, got {capability!r}')
        if getattr(cls, capability):
            return None
        return f'{cls.__name__} {CAPABILITIES[capability]}'

    @classmethod
    def configured_class(cls, cfg: Optional[dict] = None) -> type:
        """The attention whose constructor ``cfg``'s keywords feed: this
        class, unless it wraps another (the window wrapper)."""
        return cls

    @property
    def inner(self) -> 'TokenAttention':
        """The attention that computes (this one, unless it wraps
        another)."""
        return self

    @classmethod
    def min_grid(cls, cfg: Optional[dict] = None) -> int:
        """Smallest side of the token grid an instance built from ``cfg``
        takes: 1, unless it reduces the grid by an unpadded strided conv
        (which then needs a whole kernel)."""
        return 1

    @classmethod
    def needs_window(cls) -> bool:
        """Whether it only runs inside a window (its constructor requires
        ``window_size``)."""
        window = inspect.signature(cls).parameters.get('window_size')
        return window is not None and window.default is inspect.Parameter.empty

    @classmethod
    def layer_plan(cls, depths: Sequence[int]) -> List[List[dict]]:
        """Configs that put this attention in every block of stages of
        ``depths`` blocks: how the contract tests, the benchmark and the
        attention-map tool place any registered attention in a skeleton.

        By default this attention in every block, inside the window wrapper
        when it can only run in a window; stateful attentions override it
        (e.g. an LA layer follows a VA layer that keeps its logits).
        """
        cfg = dict(type=cls.__name__)
        if cls.needs_window():
            cfg = dict(type='WindowedAttention', window_msa=cls.__name__)
        return [[dict(cfg) for _ in range(depth)] for depth in depths]

    def forward(self, x: torch.Tensor, hw_shape: Grid,
                state: Optional[AttentionState] = None) -> AttentionOutput:
        raise NotImplementedError

    def query_attention(self, x: torch.Tensor, hw_shape: Grid,
                        index: int, *state) -> QueryAttention:
        raise NotImplementedError(
            f'{type(self).__name__} does not report where a query looks '
            '(query_attention)')


def attention_class(name: Union[str, type]) -> type:
    """The registered attention ``name`` (a class passes through); a clear
    error listing the registered ones otherwise."""
    cls = ATTENTIONS.get(name) if isinstance(name, str) else name
    if cls is None:
        raise KeyError(f'attention {name!r} is not registered; registered: '
                       f'{sorted(ATTENTIONS.module_dict)}')
    return cls


def constructor_parameter(cls: type,
                          argument: str) -> Optional[inspect.Parameter]:
    """``argument`` of ``cls``'s constructor (None if it takes none); one
    that hands its ``**kwargs`` to its base class's takes what that
    takes."""
    for klass in cls.__mro__:
        if '__init__' not in klass.__dict__:
            continue
        parameters = inspect.signature(klass.__init__).parameters
        if argument in parameters:
            return parameters[argument]
        if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
            return None
    return None


def accepts(cls: type, argument: str) -> bool:
    """Whether ``cls``'s constructor takes ``argument`` by name."""
    return constructor_parameter(cls, argument) is not None


def argument_value(cls: type, cfg: Optional[dict], name: str):
    """The value ``name`` takes in an instance of ``cls`` built from
    ``cfg``: ``cfg``'s, else the constructor's default."""
    if cfg and name in cfg:
        return cfg[name]
    return constructor_parameter(cls, name).default


def build_attention(cfg: dict,
                    context: Optional[dict] = None,
                    **defaults) -> nn.Module:
    """Build a registered attention.

    Args:
        cfg (dict): ``type`` and the attention's own arguments.
        context (dict, optional): What a skeleton knows that some attentions
            use (``grid_size``: the pretraining token grid, ``sr_ratio``,
            ``window_size``...); each entry is given only to attentions
            whose constructor takes it, unless ``cfg`` sets it.
            Default: None.
        **defaults: Arguments every attention takes (``embed_dims``,
            ``num_heads``, ``qkv_bias``), where ``cfg`` does not set them.
    """
    cfg = dict(cfg)
    if 'type' not in cfg:
        raise KeyError(f'attention config {cfg} has no "type"; registered: '
                       f'{sorted(ATTENTIONS.module_dict)}')
    # Instantiated directly: the attention registry is ours alone, whatever
    # the default scope (mmdet, mmseg, mmpretrain) of the running config.
    cls = attention_class(cfg.pop('type'))
    for key, value in (context or {}).items():
        if accepts(cls, key):
            cfg.setdefault(key, value)
    for key, value in defaults.items():
        cfg.setdefault(key, value)
    return cls(**cfg)


def pass_on(cfg: dict, cls: type, **values) -> dict:
    """Give ``cfg`` each of ``values`` that ``cls``'s constructor takes,
    unless ``cfg`` sets it already. A value other than 0 / None / False
    that ``cls`` cannot take raises, naming it: a skeleton's keyword is
    never dropped silently."""
    for key, value in values.items():
        if accepts(cls, key):
            cfg.setdefault(key, value)
        elif value:
            why = getattr(cls, 'unsupported', {}).get(key)
            raise ValueError(f'{key}={value!r} cannot be honoured: '
                             f'{cls.__name__} takes no {key!r}' +
                             (f' ({why})' if why else ''))
    return cfg
