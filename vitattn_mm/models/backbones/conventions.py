"""Package conventions, in one place: where the stock classes of mmdet,
mmseg and mmpretrain disagree on a keyword's default or meaning, a
backbone's ``conventions`` table says so, and :meth:`for_package` makes the
class that package's configs build (kept in
:mod:`~vitattn_mm.models.backbones.packages`)."""
from typing import Dict, Optional

from . import packages


class PackageConventions:
    """Mixin of every backbone: its keyword defaults per package.

    ``conventions`` maps ``None`` to the documented plain-Python defaults
    and a package name to that package's (only what differs);
    ``frozen_stages_offset`` says how a package counts ``frozen_stages``
    (mmpretrain's Swin: 1 further).
    """

    conventions: Dict[Optional[str], dict] = {None: {}}
    #: The package whose conventions this class follows (None: plain
    #: Python); set on the classes :meth:`for_package` makes.
    package: Optional[str] = None

    @classmethod
    def default(cls, name: str, fallback=None):
        """The default of keyword ``name`` for this class's package: the
        package's where it differs, else the documented one, else
        ``fallback``."""
        for table in (cls.conventions.get(cls.package) or {},
                      cls.conventions[None]):
            if name in table:
                return table[name]
        return fallback

    @classmethod
    def conventional(cls, name: str, value):
        """Keyword ``name`` as given, or where left None the default of
        this class's package (:meth:`default`): how every skeleton reads a
        keyword whose default the packages disagree on."""
        return cls.default(name) if value is None else value

    @classmethod
    def for_package(cls, package: str) -> type:
        """The class ``package``'s configs build: ``cls`` itself, or where
        the package's stock classes differ from the documented defaults a
        subclass with its conventions (made once, kept in
        :mod:`~vitattn_mm.models.backbones.packages`)."""
        namespace = getattr(packages, package)
        variant = cls.__dict__.get('_package_variants', {}).get(package)
        if variant is None:
            variant = cls
            if cls.conventions.get(package):
                doc = (f'{cls.__name__} with {package}\'s conventions '
                       f'({cls.conventions[package]}); see '
                       f':class:`{cls.__module__}.{cls.__name__}`.')
                variant = type(cls.__name__, (cls, ), dict(
                    package=package, __doc__=doc,
                    __module__=packages.__name__,
                    __qualname__=f'{package}.{cls.__name__}'))
            if '_package_variants' not in cls.__dict__:
                cls._package_variants = {}
            cls._package_variants[package] = variant
        setattr(namespace, cls.__name__, variant)
        return variant
