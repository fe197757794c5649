"""Options declared beside the config fields they fill.

A config class is a frozen dataclass. Each field a user may set is declared with ``option(...)``
(its ``--name``, parser, default, help and metavar: one ``Opt``), each group of such fields
shared by several configs with ``nested(GroupClass)``, the group being a frozen dataclass
declared the same way (``EgressConfig``, ``CacheConfig``, the command line's ``LogAccess``...).
``swa_es.cli.settings`` reads these declarations: it gives each command its argparse options,
reads the ``SWA_ES_*`` variables and writes the table of ``docs/configuration.md``.

This package is a leaf below the command line (it imports nothing of the services or the
CLI), so that a library's own config class can carry its options; ``values`` holds the parsers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from cache.errors import SwaEsError

T = TypeVar("T")

OPTION_KEY: Final = "swa_es.option"
"""The ``dataclasses.field`` metadata key holding a field's ``Opt``."""
NESTED_KEY: Final = "swa_es.nested"
"""The metadata key holding a nested group's ``Nested``."""


class _Required:
    """The default of an option that must be given (by flag, positional or variable)."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Final = _Required()


class FieldError(SwaEsError, ValueError):
    """A config class refuses the value of its field ``field`` (``__post_init__``); the command
    line reports it under the flag or variable that gave the value."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


@dataclass(frozen=True, slots=True, eq=False)
class Opt(Generic[T]):
    """One option: ``--name`` (or positional ``NAME``), its ``SWA_ES_NAME`` variable, the parser
    of its text and its default (``REQUIRED``: one must be given; ``None``: the option is off).

    ``help`` states no default: the help line and the configuration table append it, as
    ``shown_default`` when the value itself says too little (``None`` meaning "no limit"), or,
    for a ``REQUIRED`` option of an optional group, what its absence means (``off``). One
    ``Opt`` is one row of the configuration table, whichever configs declare a field with it.

    ``old_flags``: earlier spellings of the flag (``duration`` for ``duration-s``), still
    accepted on the command line but not shown; ``old_variables``: option names whose
    ``SWA_ES_*`` variable is still read (after the new one). ``origin``: the ``Opt`` this one
    is a variant of (``field_of`` with another default): the same option, with this command's
    default.
    """

    name: str
    parse: Callable[[str, str], T]
    help: str
    default: T | _Required | None = REQUIRED
    metavar: str | None = None
    shown_default: str | None = None
    old_flags: tuple[str, ...] = ()
    old_variables: tuple[str, ...] = ()
    origin: Opt[T] | None = None

    @property
    def declaration(self) -> Opt[T]:
        """The option as declared once (itself, or what it is a variant of)."""
        return self if self.origin is None else self.origin

    @property
    def required(self) -> bool:
        """Whether a value must be given (no default)."""
        return isinstance(self.default, _Required)

    def variant(self, default: T | _Required | None, shown_default: str | None) -> Opt[T]:
        """The same option with another default (one command's)."""
        return dataclasses.replace(
            self, default=default, shown_default=shown_default, origin=self.declaration
        )


_UNCHANGED: Final = object()


def field_of(opt: Opt[Any], *, default: Any = _UNCHANGED, shown_default: Any = _UNCHANGED) -> Any:
    """A dataclass field filled by ``opt``: how several config classes declare one shared
    option. Its default is the option's, or ``default`` (with ``shown_default``) where this
    config's differs: still the one option, meaning the same in every command."""
    if default is not _UNCHANGED or shown_default is not _UNCHANGED:
        opt = opt.variant(
            opt.default if default is _UNCHANGED else default,
            None if shown_default is _UNCHANGED else shown_default,
        )
    metadata = {OPTION_KEY: opt}
    if isinstance(opt.default, _Required):
        return dataclasses.field(metadata=metadata)
    return dataclasses.field(default=opt.default, metadata=metadata)


def option(
    name: str,
    parse: Callable[[str, str], T],
    help: str,
    *,
    default: T | _Required | None = REQUIRED,
    metavar: str | None = None,
    shown_default: str | None = None,
    old_flags: tuple[str, ...] = (),
    old_variables: tuple[str, ...] = (),
) -> Any:
    """A dataclass field filled by a new option (see ``Opt``); ``field_of(Opt(...))`` where
    several config classes share the option."""
    return field_of(
        Opt(name, parse, help, default, metavar, shown_default, old_flags, old_variables)
    )


@dataclass(frozen=True, slots=True)
class Nested:
    """A field holding a group config built from its own options.

    ``optional``: the field is ``None`` unless the group's ``REQUIRED`` options are given; a
    flag of the group given without them is a ``SettingError`` (a variable is left unused)."""

    group: type[Any]
    optional: bool = False


def nested(group: type[Any], *, optional: bool = False) -> Any:
    """A dataclass field holding a ``group`` config built from the group's options."""
    return dataclasses.field(metadata={NESTED_KEY: Nested(group, optional)})


@dataclass(frozen=True, slots=True)
class Declared:
    """One field of a config class: its ``Opt``, or its ``Nested`` group (exactly one)."""

    name: str
    opt: Opt[Any] | None
    group: Nested | None


def declared_fields(config_type: type[Any]) -> Iterator[Declared]:
    """The fields of ``config_type`` in declaration order; ``TypeError`` names a field declared
    with neither (or both) of ``option`` and ``nested``."""
    for item in dataclasses.fields(config_type):
        opt = item.metadata.get(OPTION_KEY)
        group = item.metadata.get(NESTED_KEY)
        if (opt is None) == (group is None):
            raise TypeError(
                f"{config_type.__name__}.{item.name} needs exactly one of option() and nested()"
            )
        yield Declared(item.name, opt, group)


def opt_of(config_type: type[Any], field_name: str) -> Opt[Any]:
    """The ``Opt`` filling ``config_type``'s field ``field_name`` (to declare it elsewhere too,
    with ``field_of``); ``KeyError`` when that field is no option."""
    for declared in declared_fields(config_type):
        if declared.name == field_name and declared.opt is not None:
            return declared.opt
    raise KeyError(f"{config_type.__name__}.{field_name} is no option")
