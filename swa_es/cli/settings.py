"""Every ``swa-es`` setting, derived from the options its commands' config classes declare.

A command is a ``Command``: its name, its frozen config class and the options it also takes as
positional arguments (``LOG``, an old spelling kept working). Each field of the config class is
declared with ``swa_es.options.option`` (one ``Opt``: ``--name``, parser, default, help,
metavar, old spellings) or holds a group config declared the same way (``nested``). From these
declarations this module gives the command its argparse options (``--name``; hidden: its old
flags and the positional form), reads each option's ``SWA_ES_NAME`` variable (then its old
ones), writes the help lines (which show the default: no help text states one; the usage line
shows required options without brackets) and the table of ``docs/configuration.md``
(``configuration_table``; a test holds the document equal to it). Precedence: the flag, then
the variable, then the default. A variable means one thing in every command: one declared
``Opt`` (a command with another default declares a variant of it, ``field_of(OPT,
default=...)``). This is the only module that reads ``SWA_ES_*`` variables.

**Adding a flag**: declare the field on the config class that uses it, ``name: T =
option("flag-name", parser, "help", default=..., metavar=...)`` (the parsers are in
``swa_es.options.values``). Where several commands take it, declare it once: on a group they
all nest (``swa_es.cli.shared_options``, ``CacheConfig``, ``EgressConfig``), or as one ``Opt``
that each config declares a field of with ``field_of(OPT)``. Renaming a flag: keep the old
name in ``old_flags`` and ``old_variables``. Then regenerate the table of
``docs/configuration.md`` with ``.venv/bin/python tools/settings_table.py``.

**Adding a command**: write ``swa_es/cli/<command>.py`` with a frozen config class declared as
above, ``COMMAND = Command(name, ConfigClass)``, ``run(config) -> int`` and
``add_parser(subparsers)`` (which calls ``add_command`` here), and add the module to ``COMMANDS``
in ``swa_es/cli/main.py``.
"""

from __future__ import annotations

import argparse
import copy
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, TypeVar

from swa_es.options import REQUIRED, FieldError, Opt, declared_fields
from swa_es.options import values as v
from swa_es.options.values import SettingError

C = TypeVar("C")

ENV_PREFIX: Final = "SWA_ES_"


def env_name(option_name: str) -> str:
    """The environment variable of an option: ``page-size`` -> ``SWA_ES_PAGE_SIZE``."""
    return ENV_PREFIX + option_name.upper().replace("-", "_")


def variables_of(opt: Opt[Any]) -> tuple[str, ...]:
    """The ``SWA_ES_*`` variables read for ``opt``, in order: its own, then its old ones."""
    return (env_name(opt.name), *(env_name(old) for old in opt.old_variables))


def dest(opt: Opt[Any]) -> str:
    """Where argparse keeps the option's value (the key of ``flags`` in ``build_config``)."""
    return _dest_of(opt.name)


def _dest_of(flag_name: str) -> str:
    return flag_name.replace("-", "_")


def positional_dest(opt: Opt[Any]) -> str:
    """Where argparse keeps the option's value given as a positional argument (``LOG``)."""
    return "positional_" + dest(opt)


def is_switch(opt: Opt[Any]) -> bool:
    """A flag without a value (``--brief``)."""
    return opt.parse is v.boolean


def _walk(config_type: type[Any], optional: bool) -> Iterator[tuple[Opt[Any], bool]]:
    """Every option of ``config_type`` and of the groups it nests, with whether it lies in an
    optional group (then it is not required of the command, even without a default)."""
    for declared in declared_fields(config_type):
        if declared.opt is not None:
            yield declared.opt, optional
        else:
            assert declared.group is not None
            yield from _walk(declared.group.group, optional or declared.group.optional)


def options_of(config_type: type[Any]) -> list[Opt[Any]]:
    """Every option of ``config_type`` and of the groups it nests, in declaration order."""
    return [opt for opt, _ in _walk(config_type, False)]


@dataclass(frozen=True, slots=True)
class Command:
    """A command: its name, its config class (``None``: it parses its own arguments) and the
    names of the options it also takes as positional arguments (an old spelling kept working:
    usage and docs show the flag)."""

    name: str
    config_type: type[Any] | None
    positional: tuple[str, ...] = ()

    def options(self) -> list[Opt[Any]]:
        """The options it takes, each once (``TypeError`` for a flag spelling or a variable
        taken twice)."""
        options = [] if self.config_type is None else options_of(self.config_type)
        spellings = [name for opt in options for name in (opt.name, *opt.old_flags)]
        variables = [name for opt in options for name in variables_of(opt)]
        doubled = sorted(
            {name for name in spellings if spellings.count(name) > 1}
            | {name for name in variables if variables.count(name) > 1}
        )
        if doubled:
            raise TypeError(f"{self.name}: options declared twice: {', '.join(doubled)}")
        unknown = sorted(set(self.positional) - {opt.name for opt in options})
        if unknown:
            raise TypeError(f"{self.name}: positional {', '.join(unknown)} is no option of it")
        return options

    def required(self) -> list[Opt[Any]]:
        """The options it cannot run without (no default, outside an optional group)."""
        if self.config_type is None:
            return []
        return [
            opt for opt, optional in _walk(self.config_type, False) if opt.required and not optional
        ]

    def where(self, opt: Opt[Any]) -> str:
        """How help and errors name ``opt`` on this command's line (its flag)."""
        return "--" + opt.name


def default_text(opt: Opt[Any]) -> str:
    """The default as help and docs/configuration.md show it."""
    if opt.shown_default is not None:
        return opt.shown_default
    if opt.default is REQUIRED:
        return "required"
    if isinstance(opt.default, float):
        return f"{opt.default:g}"
    return str(opt.default)


# --- argparse ----------------------------------------------------------------------------------


def help_line(opt: Opt[Any], *, positional: bool = False) -> str:
    """An option's ``--help`` line: its text, its default and its variable (``positional``:
    the command also takes it as its first argument)."""
    if is_switch(opt):
        default = ""
    elif opt.default is REQUIRED and opt.shown_default is None:
        default = " (required)"
    else:
        default = f" (default: {default_text(opt)})"
    also = f"; also accepted as the first argument {opt.name.upper()}" if positional else ""
    return f"{opt.help}{default}{also} [env {env_name(opt.name)}]"


class UsageFormatter(argparse.HelpFormatter):
    """argparse's help, its usage line showing the options a command requires without
    brackets. They are not ``required=True`` for argparse, which would refuse a value given
    by a ``SWA_ES_*`` variable; ``build_config`` reports a missing one."""

    def add_usage(
        self,
        usage: str | None,
        actions: Iterable[argparse.Action],
        groups: Iterable[argparse._MutuallyExclusiveGroup],
        prefix: str | None = None,
    ) -> None:
        """Add the usage line, marking required options as required."""
        super().add_usage(usage, [_as_shown(action) for action in actions], groups, prefix)


_SHOWN_REQUIRED: Final = "swa_es_shown_required"


def _as_shown(action: argparse.Action) -> argparse.Action:
    if not getattr(action, _SHOWN_REQUIRED, False):
        return action
    shown = copy.copy(action)
    shown.required = True
    return shown


def add_options(parser: argparse.ArgumentParser, command: Command) -> None:
    """Give ``parser`` an option per option of ``command`` (hidden: its old spellings, and the
    positional argument it also takes as).

    Every value is left ``None`` when not given, so ``build_config`` can tell a flag from the
    variable and the default.
    """
    required = {id(opt) for opt in command.required()}
    for opt in command.options():
        kind: dict[str, Any] = (
            {"action": "store_const", "const": "1"} if is_switch(opt) else {"metavar": opt.metavar}
        )
        positional = opt.name in command.positional
        action = parser.add_argument(
            "--" + opt.name, dest=dest(opt), default=None,
            help=help_line(opt, positional=positional), **kind,
        )  # fmt: skip
        setattr(action, _SHOWN_REQUIRED, id(opt) in required)
        for old in opt.old_flags:
            parser.add_argument(
                "--" + old, dest=_dest_of(old), default=None, help=argparse.SUPPRESS, **kind
            )
        if positional:
            parser.add_argument(
                positional_dest(opt), nargs="?", default=None, metavar=opt.name.upper(),
                help=argparse.SUPPRESS,
            )  # fmt: skip


Run = Callable[[Any], int]
Configure = Callable[[Mapping[str, object]], object]


def add_command(
    subparsers: Any,
    command: Command,
    *,
    help: str,
    description: str,
    run: Run,
    configure: Configure | None = None,
) -> argparse.ArgumentParser:
    """Add ``command`` with its options; the parsed flags become its config (through
    ``build_config``, or ``configure`` when given) handed to ``run``. Returns the sub-parser, for
    arguments that are not options (``bench``'s script args)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        command.name, help=help, description=description, formatter_class=UsageFormatter
    )
    add_options(parser, command)
    parser.set_defaults(configure=configure or partial(build_config, command), run=run)
    return parser


# --- values ------------------------------------------------------------------------------------


def process_env() -> dict[str, str]:
    """This process's ``SWA_ES_*`` variables (the only place they are read)."""
    return {k: val for k, val in os.environ.items() if k.startswith(ENV_PREFIX)}


def given_value(
    opt: Opt[Any], command: Command, flags: Mapping[str, object], env: Mapping[str, str]
) -> tuple[object, str] | None:
    """``opt``'s value from its flag (or an old spelling of it, or the positional argument),
    else its variable (or an old one), with where it came from; ``None`` when none is given.
    The same option given twice, differently, is refused."""
    spellings = [(dest(opt), "--" + opt.name)]
    spellings += [(_dest_of(old), "--" + old) for old in opt.old_flags]
    if opt.name in command.positional:
        spellings.append((positional_dest(opt), opt.name.upper()))
    given = [(str(flags[key]), where) for key, where in spellings if flags.get(key) is not None]
    if given:
        text, where = given[0]
        for other_text, other in given[1:]:
            if other_text != text:
                raise SettingError(other, f"given again (as {where}): give it once")
        return opt.parse(text, where), where
    for variable in variables_of(opt):
        if variable in env:
            return opt.parse(env[variable], variable), variable
    return None


def build_config(
    command: Command, flags: Mapping[str, object], env: Mapping[str, str] | None = None
) -> Any:
    """``command``'s frozen config from ``flags`` (argparse's values, ``None`` when not given),
    the ``SWA_ES_*`` variables (``env=None`` reads the process's) and the defaults."""
    assert command.config_type is not None, f"{command.name} parses its own arguments"
    env = process_env() if env is None else env
    return _build(command.config_type, command, flags, env, optional=False)


def _build(
    config_type: type[C],
    command: Command,
    flags: Mapping[str, object],
    env: Mapping[str, str],
    *,
    optional: bool,
) -> C | None:
    """One (group) config; ``None`` for an ``optional`` group whose required options are not
    all given."""
    values: dict[str, object] = {}
    where: dict[str, str] = {}
    missing: list[Opt[Any]] = []
    for declared in declared_fields(config_type):
        if declared.group is not None:
            values[declared.name] = _build(
                declared.group.group, command, flags, env, optional=declared.group.optional
            )
            continue
        opt = declared.opt
        assert opt is not None
        given = given_value(opt, command, flags, env)
        if given is not None:
            values[declared.name], where[declared.name] = given
        elif opt.default is REQUIRED:
            missing.append(opt)
        else:
            values[declared.name] = opt.default
    if missing:
        # A flag of an optional group given without what turns the group on would be silently
        # unused; a variable may be set for every command of a deployment, so it is not refused.
        flags_given = [named for named in where.values() if not named.startswith(ENV_PREFIX)]
        if optional and flags_given:
            raise SettingError(
                flags_given[0],
                f"takes effect only with {command.where(missing[0])} "
                f"(or {env_name(missing[0].name)}), which is not set",
            )
        if optional:
            return None
        raise SettingError(
            command.where(missing[0]), f"is required (or set {env_name(missing[0].name)})"
        )
    try:
        return config_type(**values)
    except FieldError as exc:
        opt_of = {d.name: d.opt for d in declared_fields(config_type) if d.opt is not None}
        named = where.get(exc.field) or command.where(opt_of[exc.field])
        raise SettingError(named, exc.reason) from None


# --- docs/configuration.md -------------------------------------------------------------------


def configuration_table(commands: Iterable[Command]) -> str:
    """The configuration table of ``docs/configuration.md`` (markdown): one line per option
    (as declared once), in the order ``commands`` first take them, naming every command that
    takes it, and each command's default where they differ."""
    takers: dict[Opt[Any], list[tuple[Command, Opt[Any]]]] = {}
    for command in commands:
        for opt in command.options():
            takers.setdefault(opt.declaration, []).append((command, opt))
    lines = [
        "| variable | flag | meaning (default) | commands |",
        "|---|---|---|---|",
    ]
    for declared, takes in takers.items():
        meaning = f"{declared.help}{_table_default(takes)}".replace("|", "\\|")
        names = ", ".join(command.name for command, _ in takes)
        lines.append(f"| `{env_name(declared.name)}` | `--{declared.name}` | {meaning} | {names} |")
    return "\n".join(lines) + "\n"


def _table_default(takes: list[tuple[Command, Opt[Any]]]) -> str:
    """`` (DEFAULT)``, or `` (cmd: DEFAULT; ...)`` where commands' defaults differ; nothing for
    a switch."""
    if is_switch(takes[0][1]):
        return ""
    by_default: dict[str, list[str]] = {}
    for command, opt in takes:
        by_default.setdefault(default_text(opt), []).append(command.name)
    if len(by_default) == 1:
        return f" ({next(iter(by_default))})"
    return (
        " (" + "; ".join(f"{', '.join(names)}: {text}" for text, names in by_default.items()) + ")"
    )
