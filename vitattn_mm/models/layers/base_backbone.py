"""The staged backbone every skeleton is built on.

A backbone is a stem, then ``stages``, each a :class:`Stage`: an optional
patch embedding that opens it (PVT, CSwin, L2ViT), an optional learned
position embedding, its ``blocks``, an optional norm closing it on the main
path (PVTv2), and an optional downsampling that ends it (Swin's patch
merging). Output ``i`` is stage ``i``'s tokens through the output norm
``norm{i}`` where the skeleton has one. :class:`StagedBackbone` owns what
follows from that layout, once for every skeleton:

* the arch zoo and the ``attn_cfgs`` grammar (:func:`resolve_attn_cfgs`);
* the forward loop, which threads a stateful attention's state through
  every block and stage and hands its auxiliary losses to the task model;
* gradient checkpointing (per block);
* ``frozen_stages`` as mmdet and mmseg mean it, ``norm_eval``, ``train()``
  returning the module;
* argument checks, input-size checks, and pretrained loading with a report
  (official layouts through :meth:`convert_checkpoint`, older layouts of
  our own and OpenMMLab's through :meth:`migrate_keys`, which also runs as
  a load hook so ``load_state_dict`` and ``load_from`` read them).
"""
from numbers import Integral
from typing import (Callable, Dict, List, Optional, Sequence, Tuple, Union)

import torch
import torch.nn as nn
import torch.utils.checkpoint as cp
from mmdet.models.layers import nlc_to_nchw
from mmengine.model import BaseModule, ModuleList
from mmengine.model.weight_init import trunc_normal_
from mmengine.registry import DefaultScope
from torch.nn.modules.batchnorm import _BatchNorm

from .attention import AttentionState, Grid
from .pretrained import (MIN_LOADED_RATIO, LoadReport, StateDict,
                         load_pretrained)

ArchZoo = Dict[Union[str, Tuple[str, ...]], dict]
AttnCfgs = Union[None, dict, Sequence[Union[None, dict, Sequence[dict]]]]


def freeze_module(module: nn.Module) -> None:
    """Put ``module`` in eval mode and stop its gradients."""
    module.eval()
    for param in module.parameters():
        param.requires_grad = False


def linear_drop_path_rates(rate: float, num_blocks: int) -> List[float]:
    """Stochastic depth growing linearly from 0 to ``rate`` over the blocks
    (plain floats, so models also build on the meta device)."""
    return [rate * i / max(num_blocks - 1, 1) for i in range(num_blocks)]


def init_linear_and_norm(module: nn.Module) -> None:
    """timm's ViT initialisation, shared by Swin, PVT and their offspring:
    truncated-normal (std 0.02) Linear weights, zero biases, unit
    LayerNorms. Use with ``model.apply``."""
    if isinstance(module, nn.Linear):
        trunc_normal_(module.weight, std=.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


def resolve_attn_cfgs(attn_cfgs: AttnCfgs, depths: Sequence[int],
                      default: Union[dict, Callable[[int, int], dict]]
                      ) -> List[List[dict]]:
    """``attn_cfgs`` as one config per block of every stage.

    The grammar every skeleton shares: a dict (or None) serves every stage;
    a list gives each stage its entry: a dict for all its blocks, a list
    with one per block, or None for the skeleton's own attention
    (``default``: a dict, or ``default(stage, block)``).
    """
    num_stages = len(depths)
    if attn_cfgs is None or isinstance(attn_cfgs, dict):
        attn_cfgs = [attn_cfgs] * num_stages
    if not isinstance(attn_cfgs, (list, tuple)):
        raise TypeError('attn_cfgs must be a dict, a list (one entry per '
                        f'stage) or None, got {type(attn_cfgs).__name__}')
    if len(attn_cfgs) != num_stages:
        raise ValueError(f'attn_cfgs has {len(attn_cfgs)} entries for '
                         f'{num_stages} stages')
    resolved = []
    for i, (cfg, depth) in enumerate(zip(attn_cfgs, depths)):
        if cfg is None or isinstance(cfg, dict):
            cfg = [cfg] * depth
        elif len(cfg) != depth:
            raise ValueError(f'attn_cfgs of stage {i} lists {len(cfg)} '
                             f'blocks; the stage has {depth}')
        blocks = []
        for j, block in enumerate(cfg):
            if block is None:
                block = default(i, j) if callable(default) else default
            elif not isinstance(block, dict):
                raise TypeError(f'attn_cfgs of stage {i}, block {j}: '
                                f'expected a dict or None, got {block!r}')
            blocks.append(dict(block))
        resolved.append(blocks)
    return resolved


def current_scope() -> Optional[str]:
    """The default scope of the running config ('mmdet', 'mmseg',
    'mmpretrain'), if any."""
    scope = DefaultScope.get_current_instance()
    return None if scope is None else scope.scope_name


class Stage(BaseModule):
    """One stage of a :class:`StagedBackbone` (attributes left None are
    absent, so they take no keys in the state dict).

    Args:
        blocks (nn.ModuleList): The blocks, ``block(x, hw, state) ->
            (x, state)``.
        patch_embed (nn.Module, optional): Opens the stage: an NCHW map ->
            ``(tokens, hw)``. Default: None.
        pos_embed (nn.Module, optional): ``pos_embed(hw)`` is added to the
            tokens. Default: None.
        norm (nn.Module, optional): Closes the stage on the main path.
            Default: None.
        downsample (nn.Module, optional): Ends the stage after its output:
            ``(tokens, hw) -> (tokens, hw)``. Default: None.
    """

    def __init__(self,
                 blocks: nn.ModuleList,
                 patch_embed: Optional[nn.Module] = None,
                 pos_embed: Optional[nn.Module] = None,
                 norm: Optional[nn.Module] = None,
                 downsample: Optional[nn.Module] = None):
        super().__init__()
        self.patch_embed = patch_embed
        self.pos_embed = pos_embed
        self.blocks = blocks
        self.norm = norm
        self.downsample = downsample


class StagedBackbone(BaseModule):
    """Base class of the package's backbones (mmpretrain style).

    A skeleton defines ``arch_zoo`` (names or tuples of aliases ->
    settings) and ``arch_keys`` (what a custom arch dict must give), calls
    ``super().__init__`` with its number of stages, builds its stem (if
    any) and ``self.stages``, adds output norms with
    :meth:`add_output_norms`, and overrides the small hooks of the forward
    loop where its layout needs it (:meth:`forward_stem`,
    :meth:`format_output`, :meth:`stem_modules`).

    Args:
        num_stages (int): Number of stages (for a plain ViT: blocks).
        out_indices (int | Sequence[int]): Stages whose outputs to return;
            negative indices count from the end.
        frozen_stages (int): -1 freezes nothing; ``k >= 0`` freezes the
            stem and the first ``k`` stages (with the downsampling that
            belongs to them and their output norms), as mmdet's and mmseg's
            Swin and every OpenMMLab ResNet count; ``k = num_stages``
            freezes everything. (mmpretrain's Swin counts one further: its
            ``k`` is our ``k + 1``.) Default: -1.
        norm_eval (bool): Keep BatchNorm layers in eval mode while training.
            Default: False.
        with_cp (bool): Gradient checkpointing of every block (the one place
            it happens). Default: False.
        pretrained (str, optional): Deprecated, as in mmdet: a checkpoint
            loaded through ``init_cfg``. Default: None.
        init_cfg (dict | list[dict], optional): ``dict(type='Pretrained',
            checkpoint=PATH, prefix=None, state_dict_key=None,
            min_loaded_ratio=0.5)`` loads a file, official layouts
            converted, and refuses one that fills less than
            ``min_loaded_ratio`` of the backbone's weights; ``type`` may be
            left out when ``checkpoint`` is given. Default: None.
    """

    arch_zoo: ArchZoo = {}
    arch_keys: Tuple[str, ...] = ()
    #: Keyword defaults that differ between the ecosystem's stock classes:
    #: ``{scope: {name: value}}``, ``None`` for plain Python use. A keyword
    #: left None takes the value of the running config's default scope.
    scope_defaults: Dict[Optional[str], dict] = {}
    #: Smallest input side (pixels) the network can process.
    min_input_size: int = 32
    #: What the last ``Pretrained`` load did (set by :meth:`init_weights`).
    load_report: Optional[LoadReport] = None

    def __init__(self,
                 num_stages: int,
                 out_indices: Union[int, Sequence[int]],
                 frozen_stages: int = -1,
                 norm_eval: bool = False,
                 with_cp: bool = False,
                 pretrained: Optional[str] = None,
                 init_cfg: Optional[Union[dict, list]] = None):
        if pretrained is not None:
            if not isinstance(pretrained, str):
                raise TypeError(f'pretrained must be a str or None, got '
                                f'{type(pretrained).__name__}')
            if init_cfg is not None:
                raise ValueError('give init_cfg or pretrained, not both')
            init_cfg = dict(type='Pretrained', checkpoint=pretrained)
        if init_cfg is not None and not isinstance(init_cfg, (dict, list)):
            raise TypeError('init_cfg must be a dict, a list or None, got '
                            f'{type(init_cfg).__name__}')
        super().__init__(init_cfg=init_cfg)
        check_type('frozen_stages', frozen_stages, Integral)
        if not -1 <= frozen_stages <= num_stages:
            raise ValueError(
                f'{type(self).__name__}: frozen_stages={frozen_stages} is '
                f'out of range; it has {num_stages} stages, so valid values '
                f'are -1 (freeze nothing), 0 (the stem) to {num_stages} '
                '(everything).')
        check_type('norm_eval', norm_eval, bool)
        check_type('with_cp', with_cp, bool)
        self.num_stages = num_stages
        self.out_indices = self.normalize_out_indices(out_indices,
                                                      num_stages)
        self.frozen_stages = int(frozen_stages)
        self.norm_eval = norm_eval
        self.with_cp = with_cp
        self.stages = ModuleList()
        # Dropout after position embeddings (skeletons with drop_rate set
        # it); no parameters.
        self.drop_after_pos = nn.Identity()
        self._aux_losses: Optional[Dict[str, torch.Tensor]] = None
        self._register_load_state_dict_pre_hook(self._migrate_on_load)

    # ----------------------------------------------------------- arguments
    @classmethod
    def arch_names(cls) -> Tuple[str, ...]:
        names = []
        for key in cls.arch_zoo:
            names.extend([key] if isinstance(key, str) else key)
        return tuple(names)

    @classmethod
    def parse_arch(cls, arch: Union[str, dict]) -> dict:
        """Settings of a named arch, or a validated custom arch dict."""
        if isinstance(arch, str):
            for key, settings in cls.arch_zoo.items():
                aliases = (key, ) if isinstance(key, str) else key
                if arch.lower() in aliases:
                    return dict(settings)
            raise KeyError(f"Unknown arch '{arch}' for {cls.__name__}. "
                           f'Valid arch names: {", ".join(cls.arch_names())}'
                           f' (or a dict with keys {list(cls.arch_keys)}).')
        if not isinstance(arch, dict):
            raise TypeError(f'arch must be a str or a dict, got '
                            f'{type(arch).__name__}')
        missing = [k for k in cls.arch_keys if k not in arch]
        if missing:
            raise KeyError(f'Custom arch for {cls.__name__} lacks {missing}; '
                           f'it needs {list(cls.arch_keys)}.')
        cls.check_per_stage(arch)
        return dict(arch)

    @staticmethod
    def check_per_stage(arch: dict) -> None:
        """Every list in a staged arch has one entry per stage."""
        depths = arch.get('depths')
        if not isinstance(depths, (list, tuple)):
            return
        for key, value in arch.items():
            if isinstance(value, (list, tuple)) and len(value) != len(depths):
                raise ValueError(f'arch {key} has {len(value)} entries; it '
                                 f'needs one per stage ({len(depths)})')

    @classmethod
    def scope_default(cls, name: str, value):
        """``value``, or where it is None the default of keyword ``name`` in
        the running config's scope (see :attr:`scope_defaults`)."""
        if value is not None:
            return value
        table = cls.scope_defaults.get(current_scope(), {})
        return table[name] if name in table else cls.scope_defaults[None][
            name]

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
                raise ValueError(f'out_indices {tuple(out_indices)} out of '
                                 f'range for {num_stages} stages')
            result.append(int(index) % num_stages)
        return tuple(sorted(set(result)))

    def check_input_size(self, x: torch.Tensor) -> None:
        """Raise a clear error for inputs the network cannot process."""
        if x.dim() != 4:
            raise ValueError(f'{type(self).__name__} expects (B, C, H, W) '
                             f'images, got shape {tuple(x.shape)}')
        if min(x.shape[-2:]) < self.min_input_size:
            raise ValueError(
                f'{type(self).__name__} needs inputs of at least '
                f'{self.min_input_size}x{self.min_input_size} pixels, got '
                f'{x.shape[-2]}x{x.shape[-1]}.')

    # ------------------------------------------------------------ building
    def add_output_norms(self, widths: Sequence[int],
                         build: Callable[[int], nn.Module]) -> None:
        """One norm ``norm{i}`` per output stage (``build(width)``)."""
        for i in self.out_indices:
            self.add_module(f'norm{i}', build(widths[i]))

    # ------------------------------------------------------------- forward
    def forward(self, x: torch.Tensor) -> tuple:
        self.check_input_size(x)
        self._aux_losses = None
        x, hw_shape = self.forward_stem(x)
        outs, state = [], None
        for i, stage in enumerate(self.stages):
            if stage.patch_embed is not None:
                x, hw_shape = stage.patch_embed(
                    x if hw_shape is None else nlc_to_nchw(x, hw_shape))
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

    def forward_stem(self, x: torch.Tensor
                     ) -> Tuple[torch.Tensor, Optional[Grid]]:
        """What runs before the first stage. By default nothing: the first
        stage's patch embedding takes the image (``hw_shape`` None)."""
        return x, None

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
    def stem_modules(self) -> List[nn.Module]:
        """What ``frozen_stages >= 0`` freezes besides stages: the stem, by
        default the first stage's patch embedding."""
        return [self.stages[0].patch_embed]

    def frozen_parameters(self) -> List[nn.Parameter]:
        """Loose parameters ``frozen_stages >= 0`` freezes (e.g. a class
        token); none by default."""
        return []

    def final_modules(self) -> List[nn.Module]:
        """What only ``frozen_stages = num_stages`` freezes beyond the
        stages (e.g. a ViT's final norm); none by default."""
        return []

    #: Whether ``frozen_stages=0`` freezes the stem (mmdet, mmseg); False
    #: for skeletons that follow a stock class freezing nothing at 0
    #: (mmpretrain's ViT).
    freezes_stem_at_zero: bool = True

    def _freeze_stages(self) -> None:
        if self.frozen_stages < 0 or (self.frozen_stages == 0
                                      and not self.freezes_stem_at_zero):
            return
        for module in self.stem_modules():
            freeze_module(module)
        for param in self.frozen_parameters():
            param.requires_grad = False
        for i in range(self.frozen_stages):
            freeze_module(self.stages[i])
            norm = getattr(self, f'norm{i}', None)
            if norm is not None:
                freeze_module(norm)
        if self.frozen_stages == self.num_stages:
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

    # ------------------------------------------------------------ weights
    @classmethod
    def convert_checkpoint(cls, state_dict: StateDict) -> StateDict:
        """Map an official release's key names to ours (identity by
        default)."""
        return state_dict

    def migrate_keys(self, state_dict: dict, prefix: str = '') -> None:
        """Rename, in place, keys of older layouts under ``prefix`` (files
        of earlier versions, OpenMMLab's own classes) to today's; nothing by
        default. Any submodule may define a ``migrate_keys`` of its own
        (e.g. :class:`~vitattn_mm.models.layers.WindowedAttention`); all of
        them run, outermost first, whenever a state dict is loaded."""

    def migrate_all_keys(self, state_dict: dict, prefix: str = '') -> None:
        """Every ``migrate_keys`` of this backbone and its submodules."""
        for name, module in self.named_modules():
            migrate = getattr(module, 'migrate_keys', None)
            if callable(migrate):
                migrate(state_dict, f'{prefix}{name}.' if name else prefix)

    def _migrate_on_load(self, state_dict, prefix, *args, **kwargs):
        self.migrate_all_keys(state_dict, prefix)

    def convert_and_migrate(self, state_dict: StateDict) -> StateDict:
        """:meth:`convert_checkpoint`, then every ``migrate_keys``."""
        state_dict = dict(self.convert_checkpoint(state_dict))
        self.migrate_all_keys(state_dict)
        return state_dict

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
            convert=self.convert_and_migrate,
            map_location=cfg.get('map_location', 'cpu'),
            min_loaded_ratio=cfg.get('min_loaded_ratio', MIN_LOADED_RATIO))
        self._is_init = True


def check_type(name: str, value, types) -> None:
    """Raise a TypeError naming ``name`` unless ``value`` is of ``types``
    (a bool is no int here)."""
    if isinstance(value, bool) and types is not bool:
        ok = False
    else:
        ok = isinstance(value, types)
    if not ok:
        expected = getattr(types, '__name__', str(types))
        raise TypeError(f'{name} must be {expected}, got {value!r}')
