"""The one checkpoint path of the backbones.

Every loader (``load_state_dict``, mmengine's ``load_checkpoint``,
``load_from``, ``resume`` and ``init_cfg``) reaches a backbone's
``_load_from_state_dict``, and there a file's tensors are brought to the
model once, in one place (:meth:`CheckpointLoading.adapt_state_dict`):
official releases converted (one converter per skeleton, in timm's
``checkpoint_filter_fn`` style, with the families' block converters
registered here by the attention they convert), the stock classes'
layouts migrated (for files that do not record this package's layout),
and learned position tables resized to the model's grids.
"""
from collections import OrderedDict
from typing import Callable, Dict, Optional, Tuple

import torch

from ..attentions.base import Grid
from ..layers.pos_embed import ResizablePosEmbed, resize_loaded_pos_embed
from .pretrained import (LAYOUT_KEY, MIN_LOADED_RATIO, LoadReport,
                         StateDict, load_pretrained)

#: ``(prefix, official name, tensor) -> {our key: tensor}``: one official
#: tensor of a block.
BlockConverter = Callable[[str, str, torch.Tensor], StateDict]

#: Official-layout block converters of the families, by skeleton and
#: attention class name (:func:`register_block_converter`).
BLOCK_CONVERTERS: Dict[Tuple[str, str], BlockConverter] = {}


def register_block_converter(skeleton: str, attention: str):
    """Register ``fn(prefix, name, value) -> {our key: tensor}`` as the
    converter of one official tensor of a ``skeleton`` block whose attention
    is ``attention`` (a registered name), e.g. FLatten's blocks in official
    Swin files. The skeleton's converter dispatches on the attention the
    model has in that block."""

    def _register(fn):
        BLOCK_CONVERTERS[(skeleton, attention)] = fn
        return fn

    return _register


def block_converter(skeleton: str, block_attention, stage: int, block: int,
                    default: BlockConverter) -> Tuple[BlockConverter, bool]:
    """The converter of an official block's tensors, and whether the model
    runs that block's attention in windows: the converter a family
    registered for the attention the model has there, else the skeleton's
    ``default`` (also for a block the model lacks, whose tensors are then
    reported unexpected)."""
    try:
        attention, windowed = block_attention(stage, block)
    except IndexError:
        return default, False
    return BLOCK_CONVERTERS.get((skeleton, attention), default), windowed


class CheckpointLoading:
    """What a :class:`~vitattn_mm.models.backbones.StagedBackbone` does with
    a state dict it is given (a mixin of it). Skeletons override
    :meth:`convert_official_keys`, :meth:`migrate_layout` and
    :meth:`position_tables`."""

    #: What the last ``Pretrained`` load did (set by :meth:`init_weights`).
    load_report: Optional[LoadReport] = None
    #: The command that converts this family's official release into a
    #: classifier checkpoint once (``python CMD SRC DST``), or None where
    #: there is none (the release still loads through ``init_cfg``).
    converter_command: Optional[str] = None
    #: This package's state-dict layout, recorded in a file's metadata under
    #: a key of its own (``LAYOUT_KEY``; the module ``version`` slot is the
    #: stock classes', e.g. mmpretrain's Swin's 3). A file without it (an
    #: official release, a stock class's, a stripped state dict) is
    #: adapted when loaded (:meth:`adapt_state_dict`).
    layout: int = 1

    def convert_official(self, state_dict: StateDict) -> StateDict:
        """An official release's tensors under this backbone's names;
        other layouts pass through (:meth:`convert_official_keys` with
        this model's blocks)."""
        return self.convert_official_keys(state_dict, self.block_attention)

    @staticmethod
    def convert_official_keys(state_dict: StateDict,
                              block_attention) -> StateDict:
        """The skeleton's converter of official releases (identity by
        default), given ``block_attention(stage, block) -> (attention
        name, windowed)`` of the network the file goes into: a model's or
        a description's (:meth:`BackboneSpec.block_attention`), so a file
        converts without building the network."""
        return state_dict

    def migrate_layout(self, state_dict: StateDict) -> StateDict:
        """Tensors of the stock classes' layouts (mmdet's, mmseg's,
        mmpretrain's) and of this package's earlier versions under today's
        names; today's pass through (nothing by default)."""
        return state_dict

    def position_tables(self) -> Dict[str, Tuple[Grid, str, int]]:
        """Learned position tables by state-dict key: their grid,
        interpolation mode and leading extra tokens. Every
        :class:`ResizablePosEmbed`; skeletons add tables of their own."""
        return {
            f'{name}.weight': (m.grid_hw, m.mode, m.num_extra_tokens)
            for name, m in self.named_modules()
            if isinstance(m, ResizablePosEmbed)
        }

    def adapt_state_dict(self, state_dict: dict, prefix: str = '',
                         layout: Optional[int] = None) -> None:
        """Bring a file's tensors under ``prefix`` to this backbone, in
        place: the one checkpoint path, which every loader takes
        (``load_state_dict``, mmengine's ``load_checkpoint``, ``load_from``,
        ``resume``, ``init_cfg``) through ``_load_from_state_dict``.

        A file of another layout (``layout`` is not this package's:
        official releases, the stock classes' files, stripped state dicts)
        is converted (:meth:`convert_official`, with ``convert_weights``)
        and migrated (:meth:`migrate_layout`). Any file's attention tensors
        go under the window wrapper (``attn.w_msa.``) where this model runs
        the attention in windows and the file did not, or the other way
        round; every position table learned on another grid is resized to
        this model's (:meth:`position_tables`), and one that cannot be is
        refused by name.
        """
        own = OrderedDict((k[len(prefix):], state_dict.pop(k))
                          for k in [k for k in state_dict
                                    if k.startswith(prefix)])
        if layout != self.layout:
            if self.convert_weights:
                own = self.convert_official(own)
            own = self.migrate_layout(own)
        state_dict.update((prefix + k, v)
                          for k, v in self._match_windows(own).items())
        for key, (grid, mode, extra) in self.position_tables().items():
            value = state_dict.get(prefix + key)
            if isinstance(value, torch.Tensor):
                state_dict[prefix + key] = resize_loaded_pos_embed(
                    value, grid, mode, extra, name=key)

    def _match_windows(self, state_dict: StateDict) -> StateDict:
        """An attention's tensors under the window wrapper's prefix
        (``attn.w_msa.``) where this model has the wrapper and the file has
        not, and the other way round: the same attention, in windows or
        over the whole map (e.g. FLatten-Swin's ``flatten_window_size``)."""
        model_keys = self.state_dict().keys()
        matched = OrderedDict()
        for key, value in state_dict.items():
            if key not in model_keys:
                other = key.replace('.attn.w_msa.', '.attn.', 1) \
                    if '.attn.w_msa.' in key else \
                    key.replace('.attn.', '.attn.w_msa.', 1)
                if other in model_keys and other not in state_dict:
                    key = other
            matched[key] = value
        return matched

    def _load_from_state_dict(self, state_dict, prefix, local_metadata,
                              *args, **kwargs):
        self.adapt_state_dict(state_dict, prefix,
                              local_metadata.get(LAYOUT_KEY))
        super()._load_from_state_dict(state_dict, prefix, local_metadata,
                                      *args, **kwargs)

    @staticmethod
    def record_layout(module, state_dict, prefix, local_metadata) -> None:
        """A ``state_dict`` hook: the file says it is of this layout."""
        local_metadata[LAYOUT_KEY] = module.layout

    def init_weights(self) -> None:
        cfg = self.init_cfg
        # mmdet users often write init_cfg=dict(checkpoint=...) without a
        # type; mmengine would fail on it with a bare KeyError.
        pretrained = isinstance(cfg, dict) and (
            cfg.get('type') == 'Pretrained'
            or ('type' not in cfg and 'checkpoint' in cfg))
        if not pretrained:
            super().init_weights()
            return
        if 'checkpoint' not in cfg:
            raise KeyError("init_cfg of type 'Pretrained' needs 'checkpoint'")
        self.load_report = load_pretrained(
            self,
            cfg['checkpoint'],
            prefix=cfg.get('prefix'),
            state_dict_key=cfg.get('state_dict_key'),
            map_location=cfg.get('map_location', 'cpu'),
            min_loaded_ratio=cfg.get('min_loaded_ratio', MIN_LOADED_RATIO))
        self._is_init = True

