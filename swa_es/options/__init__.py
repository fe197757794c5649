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
    """

    name: str
    parse: Callable[[str, str], T]
    help: str
    default: T | _Required | None = REQUIRED
    metavar: str | None = None
    shown_default: str | None = None


def field_of(opt: Opt[Any]) -> Any:
    """A dataclass field filled by ``opt`` (its default is the option's): how several config
    classes declare one shared option."""
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
) -> Any:
    """A dataclass field filled by a new option (see ``Opt``); ``field_of(Opt(...))`` where
    several config classes share the option."""
    return field_of(Opt(name, parse, help, default, metavar, shown_default))


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
