"""Arch resolution: the zoo of named sizes, custom arch dicts and the stock
keywords that name arch settings."""
from typing import Dict, List, Tuple, Union

from ..layers.common import InvalidArch

ArchZoo = Dict[Union[str, Tuple[str, ...]], dict]


class ArchResolution:
    """How a backbone class turns ``arch`` and the stock keywords into its
    settings (mmpretrain style: an ``arch_zoo`` of names, or a dict).

    A skeleton defines ``arch_zoo`` (names or tuples of aliases ->
    settings), ``arch_keys`` (what a custom arch dict must give) and
    ``arch_aliases`` (stock keywords naming arch settings); a family may
    add its own zoo (its paper's sizes), found first.
    """

    arch_zoo: ArchZoo = {}
    arch_keys: Tuple[str, ...] = ()
    #: What a family adds to an arch named from its skeleton's zoo (e.g.
    #: where Less-Attention starts).
    stock_arch_defaults: dict = {}
    #: Stock keywords that name an arch setting: ``{keyword: arch key}``
    #: (mmdet's PVT says ``num_layers`` for ``depths``).
    arch_aliases: Dict[str, str] = {}

    @classmethod
    def arch_zoos(cls) -> List[ArchZoo]:
        """The class's arch zoo, then those of the classes it is built on:
        a family's own names (its paper's sizes) come first, and every name
        its skeleton (the stock class) knows is valid too."""
        return [c.__dict__['arch_zoo'] for c in cls.__mro__
                if 'arch_zoo' in c.__dict__]

    @classmethod
    def arch_names(cls) -> Tuple[str, ...]:
        names = []
        for zoo in cls.arch_zoos():
            for key in zoo:
                names.extend(n for n in ((key, ) if isinstance(key, str)
                                         else key) if n not in names)
        return tuple(names)

    @classmethod
    def parse_arch(cls, arch: Union[str, dict]) -> dict:
        """Settings of a named arch (an arch of the skeleton's zoo gets the
        family's :attr:`stock_arch_defaults`), or a validated custom arch
        dict (stock key names accepted, see :attr:`arch_aliases`)."""
        if isinstance(arch, str):
            for i, zoo in enumerate(cls.arch_zoos()):
                for key, settings in zoo.items():
                    aliases = (key, ) if isinstance(key, str) else key
                    if arch.lower() in aliases:
                        return dict(settings, **(
                            cls.stock_arch_defaults if i else {}))
            raise InvalidArch(
                f"Unknown arch '{arch}' for {cls.__name__}. Valid arch "
                f'names: {", ".join(cls.arch_names())} (or a dict with keys '
                f'{list(cls.arch_keys)}).')
        if not isinstance(arch, dict):
            raise TypeError(f'arch must be a str or a dict, got '
                            f'{type(arch).__name__}')
        arch = {cls.arch_aliases.get(k, k): v for k, v in arch.items()}
        missing = [k for k in cls.arch_keys if k not in arch]
        if missing:
            raise InvalidArch(f'Custom arch for {cls.__name__} lacks '
                              f'{missing}; it needs {list(cls.arch_keys)}.')
        return dict(arch)

    @classmethod
    def resolve_arch(cls, arch: Union[str, dict], **overrides) -> dict:
        """The arch settings: ``arch``'s, with the stock keywords given
        (``overrides``, by their stock or arch names; None: not given)
        overriding them. Lists become one entry per stage."""
        settings = cls.parse_arch(arch)
        for keyword, value in overrides.items():
            if value is not None:
                key = cls.arch_aliases.get(keyword, keyword)
                settings[key] = list(value) if isinstance(
                    value, (list, tuple)) else value
        settings = cls.normalize_arch(settings)
        cls.check_per_stage(settings)
        return settings

    @classmethod
    def normalize_arch(cls, settings: dict) -> dict:
        """Skeleton-specific forms of the settings (e.g. mmdet's PVT base
        width); as they are by default."""
        return settings

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
