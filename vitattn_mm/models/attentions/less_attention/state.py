"""What Less-Attention layers pass from layer to layer and stage to stage."""
import dataclasses
from typing import NamedTuple, Optional

import torch

from ..base import AttentionState, Grid
from .loss import DP_LOSS_FORMS, mean_diagonality_preserving_loss


class DiagonalityMap(NamedTuple):
    """An LA layer's map for the Diagonality-Preserving loss: its logits
    and grids, the loss's ``weight`` and ``form`` (a key of
    :data:`DP_LOSS_FORMS`), the layer's ``attn_backend`` (which may
    compute the loss with a fused op), the probabilities its eager
    softmax wrote, with the queries pooled onto the key grid where the
    loss pools them (None where none was, or where it read the shift mask
    that the loss leaves out), and the map's loss where the layer's fused
    softmax computed it already (unweighted; None otherwise)."""
    logits: torch.Tensor
    query_hw: Grid
    key_hw: Grid
    weight: float
    form: str
    attn_backend: str
    probs: Optional[torch.Tensor] = None
    loss: Optional[torch.Tensor] = None


@dataclasses.dataclass(frozen=True)
class LessAttentionState(AttentionState):
    """What Less-Attention layers pass on, one per forward pass.

    A VA layer keeps its logits as their factors (scaled queries, keys,
    additive bias): the layers after it read them through :meth:`scores`
    where they need the ``N_q x N_k`` map (an LA layer), while the
    Attention Residual halves the queries before the product, so the
    largest map of a PVT-like network (stage 1) is never built.

    Args:
        logits (Tensor, optional): The last kept pre-softmax logits,
            ``(B * windows, heads, N_q, N_k)``, as an LA layer computed
            them (else see ``factors``).
        query_hw (tuple[int, int]): Their query grid.
        key_hw (tuple[int, int]): Their key grid.
        windows (int): Windows per image the logits are batched over (1
            outside windows; set by the window wrapper).
        maps (tuple): The :class:`DiagonalityMap` of each LA layer of a
            training pass, for the Diagonality-Preserving loss.
        factors (tuple, optional): A VA layer's logits, kept as ``(q *
            scale, k, bias)``: ``q @ k^T + bias``, the bias None, ``(heads,
            N_q, N_k)`` or one per batch entry ``(B, heads, N_q, N_k)``.
    """
    logits: Optional[torch.Tensor] = None
    query_hw: Optional[Grid] = None
    key_hw: Optional[Grid] = None
    windows: int = 1
    maps: tuple = ()
    factors: Optional[tuple] = None

    def replace(self, **changes) -> 'LessAttentionState':
        return dataclasses.replace(self, **changes)

    @property
    def has_scores(self) -> bool:
        """Whether a layer before kept its logits."""
        return self.logits is not None or self.factors is not None

    def scores(self) -> torch.Tensor:
        """The kept logits ``(B * windows, heads, N_q, N_k)``."""
        if self.logits is not None:
            return self.logits
        if self.factors is None:
            raise ValueError('no layer before kept its logits')
        q, k, bias = self.factors
        logits = q @ k.transpose(-2, -1)
        return logits if bias is None else logits + bias

    def queries_factor(self) -> bool:
        """Whether the kept logits are factors with one bias row per query
        (none, or ``(B | 1, heads, N_q, N_k)``), so a linear map along the
        queries may act on the queries before their product."""
        if self.logits is not None or self.factors is None:
            return False
        q, _, bias = self.factors
        return bias is None or (bias.dim() == 4
                                and bias.shape[0] in (1, q.shape[0]))

    def first_image(self) -> 'LessAttentionState':
        """The state of the first image of the batch (attention maps)."""
        return self.replace(logits=self.scores()[:self.windows],
                            factors=None)

    def in_windows(self, windows_per_image: int) -> 'LessAttentionState':
        return self.replace(windows=windows_per_image)

    def aux_losses(self) -> dict:
        """``loss_dp``: the LA maps' weighted Diagonality-Preserving
        losses (none without maps): their mean for the bounded form
        (:func:`mean_diagonality_preserving_loss`, which takes a stage's
        maps in one call), their sum (paper Eq. 10) for the paper's."""
        if not self.maps:
            return {}
        maps = [DiagonalityMap(*entry) for entry in self.maps]
        total = sum(m.weight * DP_LOSS_FORMS[m.form](
            m.logits, m.query_hw, m.key_hw, attn_backend=m.attn_backend,
            probs=m.probs) for m in maps if m.form != 'bounded')
        # A mean over the maps: those whose loss the layer computed (its
        # fused softmax), and the rest in one call.
        rest = [(m.logits, m.query_hw, m.key_hw, m.weight, m.attn_backend,
                 m.probs) for m in maps
                if m.form == 'bounded' and m.loss is None]
        computed = [m.weight * m.loss for m in maps
                    if m.form == 'bounded' and m.loss is not None]
        count = len(rest) + len(computed)
        if computed:
            if rest:
                computed.append(
                    mean_diagonality_preserving_loss(rest) * len(rest))
            total = total + sum(computed) / count
        elif rest:
            total = total + mean_diagonality_preserving_loss(rest)
        return {'loss_dp': total}


def as_less_attention_state(
        state: Optional[AttentionState]) -> LessAttentionState:
    """The state a Less-Attention layer received (a fresh one for None)."""
    if state is None:
        return LessAttentionState()
    if not isinstance(state, LessAttentionState):
        raise TypeError(f'a Less-Attention layer got a {type(state).__name__}'
                        ' state from the layer before it')
    return state
