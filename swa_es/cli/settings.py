"""Every ``swa-es`` setting, derived from the options its commands' config classes declare.

A command is a ``Command``: its name, its frozen config class and the options it takes as
positional arguments. Each field of the config class is declared with ``swa_es.options.option``
(one ``Opt``: ``--name``, parser, default, help, metavar) or holds a group config declared the
same way (``nested``). From these declarations this module gives the command its argparse
options (``--name``, or ``NAME`` where positional), reads each option's ``SWA_ES_NAME`` variable,
writes the help lines (which show the default: no help text states one) and the table of
``docs/configuration.md`` (``configuration_table``; a test holds the document equal to it).
Precedence: the flag, then the variable, then the default. This is the only module that reads
``SWA_ES_*`` variables.

**Adding a flag**: declare the field on the config class that uses it, ``name: T =
option("flag-name", parser, "help", default=..., metavar=...)`` (the parsers are in
``swa_es.options.values``). Where several commands take it, declare it once: on a group they
all nest (``swa_es.cli.shared_options``, ``CacheConfig``, ``EgressConfig``), or as one ``Opt``
that each config declares a field of with ``field_of(OPT)``. Then regenerate the table of
``docs/configuration.md`` with ``.venv/bin/python tools/settings_table.py``.

**Adding a command**: write ``swa_es/cli/<command>.py`` with a frozen config class declared as
above, ``COMMAND = Command(name, ConfigClass)``, ``run(config) -> int`` and
``add_parser(subparsers)`` (which calls ``add_command`` here), and add the module to ``COMMANDS``
in ``swa_es/cli/main.py``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable, Mapping
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


def dest(opt: Opt[Any]) -> str:
    """Where argparse keeps the option's value (the key of ``flags`` in ``build_config``)."""
    return opt.name.replace("-", "_")


def is_switch(opt: Opt[Any]) -> bool:
    """A flag without a value (``--brief``)."""
    return opt.parse is v.boolean


def options_of(config_type: type[Any]) -> list[Opt[Any]]:
    """Every option of ``config_type`` and of the groups it nests, in declaration order."""
    found: list[Opt[Any]] = []
    for declared in declared_fields(config_type):
        if declared.opt is not None:
            found.append(declared.opt)
        else:
            assert declared.group is not None
            found.extend(options_of(declared.group.group))
    return found


@dataclass(frozen=True, slots=True)
class Command:
    """A command: its name, its config class (``None``: it parses its own arguments) and the
    names of the options it takes as positional arguments."""

    name: str
    config_type: type[Any] | None
    positional: tuple[str, ...] = ()

    def options(self) -> list[Opt[Any]]:
        """The options it takes, each once (``TypeError`` for a name taken twice)."""
        options = [] if self.config_type is None else options_of(self.config_type)
        names = [opt.name for opt in options]
        doubled = sorted({name for name in names if names.count(name) > 1})
        if doubled:
            raise TypeError(f"{self.name}: options declared twice: {', '.join(doubled)}")
        unknown = sorted(set(self.positional) - set(names))
        if unknown:
            raise TypeError(f"{self.name}: positional {', '.join(unknown)} is no option of it")
        return options

    def where(self, opt: Opt[Any]) -> str:
        """How the user names ``opt`` on this command's line."""
        return opt.name.upper() if opt.name in self.positional else "--" + opt.name


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


def help_line(opt: Opt[Any]) -> str:
    """An option's ``--help`` line: its text, its default and its variable."""
    if is_switch(opt):
        default = ""
    elif opt.default is REQUIRED and opt.shown_default is None:
        default = " (required)"
    else:
        default = f" (default: {default_text(opt)})"
    return f"{opt.help}{default} [env {env_name(opt.name)}]"


def add_options(parser: argparse.ArgumentParser, command: Command) -> None:
    """Give ``parser`` an option (or positional argument) per option of ``command``.

    Every value is left ``None`` when not given, so ``build_config`` can tell a flag from the
    variable and the default.
    """
    for opt in command.options():
        if opt.name in command.positional:
            parser.add_argument(
                dest(opt), nargs="?", default=None, metavar=opt.name.upper(), help=help_line(opt)
            )
        elif is_switch(opt):
            parser.add_argument(
                "--" + opt.name, dest=dest(opt), action="store_const", const="1", default=None,
                help=help_line(opt),
            )  # fmt: skip
        else:
            parser.add_argument(
                "--" + opt.name, dest=dest(opt), default=None, metavar=opt.metavar,
                help=help_line(opt),
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
        command.name, help=help, description=description
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
    """``opt``'s value from its flag, else its variable, with where it came from; ``None`` when
    neither is given."""
    flag = flags.get(dest(opt))
    if flag is not None:
        where = command.where(opt)
        return opt.parse(str(flag), where), where
    variable = env_name(opt.name)
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
    """The configuration table of ``docs/configuration.md`` (markdown): one line per option,
    in the order ``commands`` first take them, naming every command that takes it."""
    takers: dict[Opt[Any], list[Command]] = {}
    for command in commands:
        for opt in command.options():
            takers.setdefault(opt, []).append(command)
    lines = [
        "| variable | flag | meaning (default) | commands |",
        "|---|---|---|---|",
    ]
    for opt, takes in takers.items():
        positional = [c.name for c in takes if opt.name in c.positional]
        named = [] if len(positional) == len(takes) else [f"`--{opt.name}`"]
        if positional:
            named.append(f"`{opt.name.upper()}` ({', '.join(positional)})")
        default = "" if is_switch(opt) else f" ({default_text(opt)})"
        meaning = f"{opt.help}{default}".replace("|", "\\|")
        names = ", ".join(c.name for c in takes)
        lines.append(f"| `{env_name(opt.name)}` | {', '.join(named)} | {meaning} | {names} |")
    return "\n".join(lines) + "\n"
