"""The staged backbone every skeleton is built on.

A backbone is a stem (``patch_embed``, the same name in every skeleton),
then ``stages``, each a :class:`Stage`: an optional patch embedding that
opens it (PVT, CSwin, L2ViT after the first), an optional learned position
embedding, its ``blocks``, an optional norm closing it on the main path
(PVTv2), and an optional downsampling that ends it (Swin's patch merging).
Output ``i`` is stage ``i``'s tokens through the output norm ``norm{i}``
where the skeleton has one. :class:`StagedBackbone` owns what follows from
that layout, once for every skeleton:

* the arch zoo and the stock keywords that name arch settings
  (:meth:`resolve_arch`, :mod:`.arch`); the ``attn_cfgs`` grammar is the
  attentions' (:mod:`~vitattn_mm.models.attentions.cfgs`);
* the network from its description (:meth:`build`, the one builder, from
  a :class:`~.backbone_spec.BackboneSpec`: the stem, each stage from its
  :class:`~.stage_spec.StageSpec` with its slice of the drop-path
  schedule and each attention built with what the skeleton knows, the
  output norms), and that description without building
  (:meth:`spec`);
* the forward loop, which threads the attention state through every block
  and stage and hands its auxiliary losses to the task model; gradient
  checkpointing (per block);
* ``frozen_stages``, ``norm_eval``, ``train()`` returning the module, with
  each OpenMMLab package's meaning in that package's class
  (:class:`~vitattn_mm.models.backbones.conventions.PackageConventions`);
* the one checkpoint path, which every loader takes
  (:class:`~vitattn_mm.models.checkpoint.adapt.CheckpointLoading`);
* each parameter's depth for layer-wise learning-rate decay
  (:class:`~vitattn_mm.models.backbones.layer_depth.LayerDepth`).
"""
from contextvars import ContextVar
from numbers import Integral
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.utils.checkpoint as cp
from mmengine.model import BaseModule, ModuleList
from torch.nn.modules.batchnorm import _BatchNorm

from ...ops import check_backend
from ..attentions.base import AttentionState, Grid, build_attention
from ..attentions.cfgs import AttnCfgs
from ..checkpoint.adapt import CheckpointLoading
from ..layers.common import (InvalidArgument, check_type, freeze_module,
                             nlc_to_nchw)
from ..layers.stage import Stage
from .arch import ArchResolution
from .backbone_spec import BackboneSpec
from .conventions import PackageConventions
from .input_size import InputSize
from .layer_depth import LayerDepth
from .stage_spec import StageSpec

#: Set while :meth:`StagedBackbone.spec` runs a constructor for its
#: description only.
_DESCRIBING: ContextVar[bool] = ContextVar('describing', default=False)


def _make(factory: Optional[Callable[[], object]]):
    """What a description's factory makes (None for an absent part)."""
    return None if factory is None else factory()


class _Described(Exception):
    """Ends a constructor run by :meth:`StagedBackbone.spec` where it
    would start building, carrying the description."""

    def __init__(self, spec: BackboneSpec):
        super().__init__(spec)
        self.spec = spec

#: The modules of the skeletons (the classes that take ``attn_cfgs``).
SKELETON_MODULES = ('swin', 'pvt', 'vit', 'cswin', 'l2vit')


def family_attn_cfgs(family: type, kwargs: dict, plan: AttnCfgs) -> AttnCfgs:
    """The ``attn_cfgs`` a family hands its skeleton: its own ``plan``,
    built from its own keywords. One rule for every family: ``attn_cfgs``
    given to the family is refused by name (it would replace the plan, and
    the family's keywords with it); the skeleton takes it."""
    if 'attn_cfgs' in kwargs:
        skeleton = next(c for c in family.__mro__[1:] if c.__module__.rsplit(
            '.', 1)[-1] in SKELETON_MODULES)
        raise TypeError(
            f'{family.__name__} builds its attentions from its own keywords '
            'and takes no attn_cfgs; to place attentions yourself, give '
            f'attn_cfgs to {skeleton.__name__}')
    return plan


class StagedBackbone(PackageConventions, ArchResolution, CheckpointLoading,
                     InputSize, LayerDepth, BaseModule):
    """Base class of the package's backbones (mmpretrain style).

    A skeleton defines ``arch_zoo`` (names or tuples of aliases ->
    settings), ``arch_keys`` (what a custom arch dict must give) and
    ``arch_aliases`` (stock keywords naming arch settings), resolves its
    arch with :meth:`resolve_arch` and its ``attn_cfgs`` with
    :func:`~vitattn_mm.models.attentions.cfgs.resolve_attn_cfgs`, calls
    ``super().__init__``, describes the network in a
    :class:`~.backbone_spec.BackboneSpec` (building nothing before) and
    hands it to :meth:`build`, and overrides the small hooks of the
    forward loop where its layout needs it (:meth:`forward_stem`,
    :meth:`close_stage`, :meth:`format_output`).

    Args:
        num_stages (int): Number of stages (for a plain ViT: blocks).
        out_indices (int | Sequence[int]): Stages whose outputs to return;
            negative indices count from the end.
        frozen_stages (int): -1 freezes nothing; ``k >= 0`` freezes the
            stem and the first ``k`` stages (with the downsampling that
            belongs to them and their output norms), as mmdet's and mmseg's
            Swin and every OpenMMLab ResNet count; ``k = num_stages``
            freezes everything. In mmpretrain's class of a Swin, ``k``
            freezes what mmpretrain's Swin freezes (the stem and stages
            ``0..k``). Default: -1.
        norm_eval (bool): Keep BatchNorm layers in eval mode while training.
            Default: False.
        with_cp (bool): Gradient checkpointing of every block (the one place
            it happens). Default: False.
        convert_weights (bool): Convert official releases' key names when
            loading (every loader); False loads only this package's and the
            stock classes' layouts. Default: True.
        attn_backend (str): 'auto', 'eager' or 'triton', given to every
            attention that has a fused op (:mod:`vitattn_mm.ops`; softmax
            attentions always run PyTorch's fused SDPA). 'auto' runs what
            a GPU measured faster (:mod:`vitattn_mm.ops.backend`).
            Default: 'auto'.
        pretrained (str, optional): Deprecated, as in mmdet: a checkpoint
            loaded through ``init_cfg``. Default: None.
        init_cfg (dict | list[dict], optional): ``dict(type='Pretrained',
            checkpoint=PATH, prefix=None, state_dict_key=None,
            min_loaded_ratio=0.5)`` loads a file and refuses one that fills
            less than ``min_loaded_ratio`` of the backbone's weights;
            ``type`` may be left out when ``checkpoint`` is given.
            Default: None.
    """

    #: Whether ``frozen_stages=0`` freezes the stem (mmdet, mmseg); False
    #: for skeletons that follow a stock class freezing nothing at 0
    #: (mmpretrain's ViT).
    freezes_stem_at_zero: bool = True

    def __init__(self,
                 num_stages: int,
                 out_indices: Union[int, Sequence[int]],
                 frozen_stages: int = -1,
                 norm_eval: bool = False,
                 with_cp: bool = False,
                 convert_weights: bool = True,
                 attn_backend: str = 'auto',
                 pretrained: Optional[str] = None,
                 init_cfg: Optional[Union[dict, list]] = None):
        # As the stock classes: both given is refused first; a bad init_cfg
        # raises in init_weights (mmengine's initialize).
        if pretrained is not None and init_cfg is not None:
            raise InvalidArgument('give init_cfg or pretrained, not both')
        if pretrained is not None:
            if not isinstance(pretrained, str):
                raise TypeError(f'pretrained must be a str or None, got '
                                f'{type(pretrained).__name__}')
            init_cfg = dict(type='Pretrained', checkpoint=pretrained)
        super().__init__(init_cfg=init_cfg)
        check_type('frozen_stages', frozen_stages, Integral)
        offset = self.default('frozen_stages_offset', 0)
        if not -1 <= frozen_stages <= num_stages - offset:
            zero = 'the stem' + (' and stage 0' if offset else '')
            raise InvalidArgument(
                f'{type(self).__name__}: frozen_stages={frozen_stages} is '
                f'out of range; it has {num_stages} stages, so valid values '
                f'are -1 (freeze nothing), 0 ({zero}) to '
                f'{num_stages - offset} (everything).')
        for name, value in (('norm_eval', norm_eval), ('with_cp', with_cp),
                            ('convert_weights', convert_weights)):
            check_type(name, value, bool)
        self.num_stages = num_stages
        self.out_indices = self.normalize_out_indices(out_indices,
                                                      num_stages)
        self.frozen_stages = int(frozen_stages)
        self.norm_eval = norm_eval
        self.with_cp = with_cp
        self.convert_weights = convert_weights
        self.attn_backend = check_backend(attn_backend)
        self.register_state_dict_post_hook(self.record_layout)
        self._aux_losses: Optional[Dict[str, torch.Tensor]] = None

    # ----------------------------------------------------------- arguments
    @staticmethod
    def normalize_out_indices(out_indices: Union[int, Sequence[int]],
                              num_stages: int) -> Tuple[int, ...]:
        if isinstance(out_indices, Integral):
            out_indices = [out_indices]
        if not isinstance(out_indices, (list, tuple)) or not all(
                isinstance(i, Integral) for i in out_indices):
            raise TypeError(f'out_indices must be an int or a sequence of '
                            f'ints, got {out_indices!r}')
        result = []
        for index in out_indices:
            if not -num_stages <= index < num_stages:
                raise InvalidArgument(f'out_indices {tuple(out_indices)} out '
                                      f'of range for {num_stages} stages')
            result.append(int(index) % num_stages)
        return tuple(sorted(set(result)))

    # ------------------------------------------------------------ building
    @classmethod
    def spec(cls, *args, **kwargs) -> BackboneSpec:
        """What ``cls(*args, **kwargs)`` builds, described, without
        building a module.

        The constructor's own argument handling runs (defaults, package
        conventions, checks, a family's plan) up to :meth:`build`, where it
        stops: a description cannot drift from what is built, and bad
        arguments raise here as they would there. Example::

            >>> spec = FLattenSwinTransformer.spec('tiny')
            >>> spec.stages[0].block_attention(0)
            ('FocusedLinearAttention', False)
        """
        token = _DESCRIBING.set(True)
        try:
            cls(*args, **kwargs)
        except _Described as described:
            return described.spec
        finally:
            _DESCRIBING.reset(token)
        raise RuntimeError(f'{cls.__name__} was built without calling '
                           'build(spec)')

    def build(self, spec: BackboneSpec) -> None:
        """Make the network ``spec`` describes, the one builder of every
        skeleton: the stem's parts in order, each stage
        (:meth:`build_stage`), what follows the stages, then the output
        norms ``norm{i}``. Keeps the description (:attr:`backbone_spec`)
        and the least grid side each stage's attentions take
        (:attr:`min_input_size`)."""
        if _DESCRIBING.get():
            raise _Described(spec)
        if tuple(spec.out_indices) != self.out_indices:
            raise ValueError(f'the spec returns stages {spec.out_indices}, '
                             f'the backbone {self.out_indices}')
        self.backbone_spec = spec
        # Kept: the input check reads it in every forward.
        self.min_grids = spec.min_grids()
        for name, factory in spec.stem.items():
            setattr(self, name, _make(factory))
        if 'drop_after_pos' not in spec.stem:
            # What the forward loop adds position embeddings through.
            self.drop_after_pos = nn.Identity()
        self.stages = ModuleList(
            self.build_stage(i, stage) for i, stage in enumerate(spec.stages))
        for name, factory in spec.head.items():
            setattr(self, name, _make(factory))
        if spec.output_norm is not None:
            for i in self.out_indices:
                self.add_module(f'norm{i}',
                                spec.output_norm(spec.widths[i]))

    def build_stage(self, index: int, spec: StageSpec) -> Stage:
        """Stage ``index`` from its description, its parts made in the
        order data goes through them."""
        patch_embed = _make(spec.patch_embed)
        pos_embed = _make(spec.pos_embed)
        blocks = self.build_stage_blocks(index, spec)
        return Stage(blocks, patch_embed=patch_embed, pos_embed=pos_embed,
                     norm=_make(spec.norm), downsample=_make(spec.downsample))

    def build_stage_blocks(self, index: int, spec: StageSpec) -> ModuleList:
        """The blocks of stage ``index`` from its description: block ``j``
        is ``spec.block(attention, drop_path=spec.drop_path_rates[j],
        **spec.block_kwargs[j])`` with the attention of
        ``spec.block_cfgs()[j]`` (the backbone's ``attn_backend`` given to
        those with a fused op)."""
        blocks = ModuleList()
        for j, cfg in enumerate(spec.block_cfgs(self.attn_backend)):
            attn = build_attention(cfg, context=spec.context,
                                   **spec.attention_defaults())
            blocks.append(spec.block(attn, drop_path=spec.drop_path_rates[j],
                                     **spec.block_kwargs[j]))
        return blocks

    @property
    def stage_specs(self) -> List[StageSpec]:
        """Each stage's description (``backbone_spec.stages``)."""
        return self.backbone_spec.stages

    def block_attention(self, stage: int, block: int) -> Tuple[str, bool]:
        """The attention of a block, by class name, and whether it runs
        inside the window wrapper: read off the stage's spec."""
        return self.backbone_spec.block_attention(stage, block)

    # ------------------------------------------------------------- forward
    def forward(self, x: torch.Tensor) -> tuple:
        self.check_input_size(x)
        self._aux_losses = None
        x, hw_shape = self.forward_stem(x)
        outs, state = [], None
        for i, stage in enumerate(self.stages):
            if stage.patch_embed is not None:
                x, hw_shape = stage.patch_embed(nlc_to_nchw(x, hw_shape))
            if stage.pos_embed is not None:
                x = self.drop_after_pos(x + stage.pos_embed(hw_shape))
            for block in stage.blocks:
                x, state = self.forward_block(block, x, hw_shape, state)
            x = self.close_stage(i, x)
            if i in self.out_indices:
                outs.append(self.format_output(i, x, hw_shape))
            if stage.downsample is not None:
                x, hw_shape = stage.downsample(x, hw_shape)
        if state is not None:
            self.add_aux_losses(state)
        return tuple(outs)

    def forward_stem(self, x: torch.Tensor) -> Tuple[torch.Tensor, Grid]:
        """The image through the stem: tokens and their grid."""
        return self.patch_embed(x)

    def forward_block(self, block: nn.Module, x: torch.Tensor,
                      hw_shape: Grid, state: Optional[AttentionState]):
        """``block(x, hw_shape, state)``, checkpointed with ``with_cp``."""
        if self.with_cp and x.requires_grad:
            return cp.checkpoint(block, x, hw_shape, state,
                                 use_reentrant=False)
        return block(x, hw_shape, state)

    def close_stage(self, index: int, x: torch.Tensor) -> torch.Tensor:
        """The main path after stage ``index``'s blocks: through the
        stage's closing norm, if it has one."""
        norm = self.stages[index].norm
        return x if norm is None else norm(x)

    def format_output(self, index: int, x: torch.Tensor,
                      hw_shape: Grid) -> torch.Tensor:
        """Stage ``index``'s output: through ``norm{index}`` if there is
        one, as an NCHW map."""
        norm = getattr(self, f'norm{index}', None)
        return nlc_to_nchw(x if norm is None else norm(x), hw_shape)

    # --------------------------------------------------- auxiliary losses
    def add_aux_losses(self, state: AttentionState) -> None:
        """Keep the state's auxiliary losses for the task model, in a
        training pass with gradients only (evaluation, ``mode='tensor'``
        and FLOP counting keep nothing)."""
        if self.training and torch.is_grad_enabled():
            self._aux_losses = dict(state.aux_losses()) or None

    def pop_aux_losses(self) -> Dict[str, torch.Tensor]:
        """The auxiliary losses of the last training forward pass (e.g.
        Less-Attention's ``loss_dp``); clears them. The task models of
        :mod:`vitattn_mm.models.aux_loss` add them to their losses."""
        losses, self._aux_losses = self._aux_losses or {}, None
        return losses

    # ----------------------------------------------------- train / freeze
    def stem_parameters(self) -> List[nn.Parameter]:
        """Loose parameters of the stem besides ``patch_embed`` (a class
        token, an absolute position embedding); none by default."""
        return []

    def stem_modules(self) -> List[nn.Module]:
        """The stem's modules: ``patch_embed`` and what the skeleton adds
        before the first stage."""
        return [self.patch_embed]

    def final_modules(self) -> List[nn.Module]:
        """What only freezing every stage freezes beyond them (e.g. a ViT's
        final norm); none by default."""
        return []

    def _freeze_stages(self) -> None:
        k = self.frozen_stages
        if k < 0 or (k == 0 and not self.freezes_stem_at_zero):
            return
        k += self.default('frozen_stages_offset', 0)
        # The dropout after the stem's position embedding too, as mmdet's
        # and mmpretrain's classes do.
        for module in self.stem_modules() + [self.drop_after_pos]:
            freeze_module(module)
        for param in self.stem_parameters():
            param.requires_grad = False
        for i in range(k):
            freeze_module(self.stages[i])
            norm = getattr(self, f'norm{i}', None)
            if norm is not None:
                freeze_module(norm)
        if k == self.num_stages:
            for module in self.final_modules():
                freeze_module(module)

    def train(self, mode: bool = True):
        super().train(mode)
        self._freeze_stages()
        if mode and self.norm_eval:
            for module in self.modules():
                if isinstance(module, _BatchNorm):
                    module.eval()
        return self


__all__ = ['StagedBackbone']
