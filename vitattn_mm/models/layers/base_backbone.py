"""What every backbone of the package shares: arch zoo lookup, output indices,
stage freezing, ``norm_eval``, input-size checks and pretrained loading."""
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmengine.model import BaseModule
from mmengine.model.weight_init import trunc_normal_
from torch.nn.modules.batchnorm import _BatchNorm

from .graph_capture import use_traceable_padding
from .pretrained import (MIN_LOADED_RATIO, LoadReport, StateDict,
                         load_pretrained)

ArchZoo = Dict[Union[str, Tuple[str, ...]], dict]


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


class _ChecksAfterInit(type(BaseModule)):
    """Metaclass: once the whole ``__init__`` chain has run (the subclass has
    built its stages), let the instance validate its settings and make its
    paddings traceable."""

    def __call__(cls, *args, **kwargs):
        module = super().__call__(*args, **kwargs)
        module._check_settings()
        # Patch embeddings and mergings whose padding stays symbolic when a
        # graph is captured (ONNX, torch.compile); no effect in eager mode.
        use_traceable_padding(module)
        return module


class VitAttnBackbone(BaseModule, metaclass=_ChecksAfterInit):
    """Base class of the package's backbones (mmpretrain-style).

    Subclasses define ``arch_zoo`` (names or tuples of aliases -> settings),
    ``arch_keys`` (settings a custom arch dict must give), build their
    layers and random init in ``__init__`` (timm style), and implement
    ``forward`` and ``_freeze_stages``. ``init_weights`` then only has to
    load a ``Pretrained`` ``init_cfg``, through :meth:`convert_checkpoint`
    (official key names -> ours) and with a report of what was loaded.

    Args:
        frozen_stages (int): Stages to freeze (and the stem when >= 0), from
            -1 (nothing) to ``num_stages - 1`` (everything); other values
            raise once the backbone is built. Default: -1.
        norm_eval (bool): Keep BatchNorm layers in eval mode while training
            (frozen statistics). Default: False.
        init_cfg (dict | list[dict], optional): Initialisation config.
            ``dict(type='Pretrained', checkpoint=PATH, prefix=None,
            state_dict_key=None, min_loaded_ratio=0.5)`` loads a file and
            refuses one that fills less than ``min_loaded_ratio`` of the
            backbone's weights; ``type`` may be left out when
            ``checkpoint`` is given (as mmdet users write it).
            Default: None.
    """

    arch_zoo: ArchZoo = {}
    arch_keys: Tuple[str, ...] = ()
    #: Smallest input side (pixels) the network can process.
    min_input_size: int = 32
    #: What the last ``Pretrained`` load did (set by :meth:`init_weights`).
    load_report: Optional[LoadReport] = None

    def __init__(self,
                 frozen_stages: int = -1,
                 norm_eval: bool = False,
                 init_cfg: Optional[Union[dict, list]] = None):
        super().__init__(init_cfg=init_cfg)
        self.frozen_stages = frozen_stages
        self.norm_eval = norm_eval

    # ----------------------------------------------------------- arch zoo
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
            raise TypeError(f'arch must be a str or a dict, got {type(arch)}')
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

    @property
    def num_stages(self) -> int:
        """How many stages ``frozen_stages`` counts: ``len(self.stages)``,
        or for a plain ViT ``len(self.blocks)`` (one stage per block).
        Subclasses with another layout assign it."""
        if getattr(self, '_num_stages', None) is not None:
            return self._num_stages
        for name in ('stages', 'blocks'):
            stages = getattr(self, name, None)
            if isinstance(stages, nn.ModuleList):
                return len(stages)
        raise NotImplementedError(
            f'{type(self).__name__} keeps its stages neither in self.stages '
            'nor in self.blocks; assign self.num_stages')

    @num_stages.setter
    def num_stages(self, value: int) -> None:
        self._num_stages = value

    def _check_settings(self) -> None:
        """Validate what can only be checked once the layers exist."""
        if self.frozen_stages == -1:
            return
        num_stages = self.num_stages
        if (not isinstance(self.frozen_stages, int)
                or isinstance(self.frozen_stages, bool)
                or not -1 <= self.frozen_stages < num_stages):
            raise ValueError(
                f'{type(self).__name__}: frozen_stages='
                f'{self.frozen_stages!r} is out of range; it has '
                f'{num_stages} stages, so valid values are -1 (freeze '
                f'nothing) to {num_stages - 1} (freeze the stem and every '
                'stage).')

    # ------------------------------------------------------------ outputs
    @staticmethod
    def normalize_out_indices(out_indices: Union[int, Sequence[int]],
                              num_stages: int) -> Tuple[int, ...]:
        if isinstance(out_indices, int):
            out_indices = [out_indices]
        result = []
        for index in out_indices:
            if not -num_stages <= index < num_stages:
                raise ValueError(f'out_indices {tuple(out_indices)} out of '
                                 f'range for {num_stages} stages')
            result.append(index % num_stages)
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

    def forward_block(self, block: nn.Module, x: torch.Tensor,
                      hw_shape: Tuple[int, int], state: dict, stage: int,
                      index: int) -> torch.Tensor:
        """Block ``index`` of ``stage``. ``state`` is one dict per forward
        pass, for attentions that pass something between layers and stages
        (Less-Attention's logits); plain token attentions need none, and
        backbones built from such attentions override this."""
        return block(x, hw_shape)

    # ----------------------------------------------------- train / freeze
    def _freeze_stages(self) -> None:
        """Freeze the stem and stages ``0..frozen_stages``."""
        raise NotImplementedError

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
        """Map another layout's key names to ours (identity by default)."""
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
            convert=self.convert_checkpoint,
            map_location=cfg.get('map_location', 'cpu'),
            min_loaded_ratio=cfg.get('min_loaded_ratio', MIN_LOADED_RATIO))
        self._is_init = True
