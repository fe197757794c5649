"""The ``swa-es`` command line: assembles one module per command and runs the one asked for.

Each module of ``COMMANDS`` (``swa_es/cli/<command>.py``) has ``add_parser(subparsers)``, which
declares the command with the options its config class declares (``swa_es.cli.settings``),
and ``run(config) -> int``, which gets the command's frozen config. ``main`` parses, builds the
config (flags, then ``SWA_ES_*`` variables, then defaults), runs, and turns any error into one
line on stderr and an exit status (``swa_es.cli.exit_codes``). The global flags (``-v``,
``--version``) are taken before or after the command. To add a command, add its module to
``COMMANDS``; see ``swa_es.cli.settings`` for the rest.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import logging
import sys
from collections.abc import Sequence
from typing import Any, Final, NoReturn

from cache.errors import SwaEsError
from swa_es.cli.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from swa_es.cli.extras import MissingExtraError, install_hint, missing_extra
from swa_es.cli.settings import Command
from swa_es.options.values import SettingError

COMMANDS: Final[tuple[str, ...]] = (
    "demo",
    "serve",
    "follow",
    "bridge",
    "inspect",
    "route",
    "snapshot",
    "restore",
    "bench",
)
"""The command modules (``swa_es.cli.<name>``), in the order ``--help`` lists them."""


class UsageError(SwaEsError):
    """Bad command-line usage (argparse's complaints, made one line)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


AFTER: Final = "_after_command"
"""The suffix of a global flag's destination when given after the command."""


def version() -> str:
    """``swa-es X.Y.Z``: the installed package's version."""
    try:
        return f"swa-es {importlib.metadata.version('swa-es')}"
    except importlib.metadata.PackageNotFoundError:
        return "swa-es (version unknown: not installed)"


def _add_global_flags(parser: argparse.ArgumentParser, suffix: str = "") -> None:
    """``-v/--verbose`` and ``--version``, taken before the command (``suffix`` empty) or after
    it (each command's parser: ``AFTER``, so the command's values do not hide the others)."""
    group = parser.add_argument_group("global options")
    group.add_argument(
        "-v",
        "--verbose",
        dest="verbose" + suffix,
        action="count",
        default=0,
        help="more logging (-vv: debug, with tracebacks)",
    )
    group.add_argument(
        "--version",
        dest="version" + suffix,
        action="store_true",
        help="print the version (swa-es X.Y.Z) and exit",
    )


def commands() -> list[Command]:
    """Every command's declaration (its module's ``COMMAND``), in ``--help`` order; the table of
    docs/configuration.md is written from these (every extra installed)."""
    return [importlib.import_module(f"swa_es.cli.{name}").COMMAND for name in COMMANDS]


def build_parser() -> argparse.ArgumentParser:
    """The ``swa-es`` argument parser."""
    parser = _Parser(
        prog="swa-es",
        description="Event-sourced SWA radix KV cache: run the demo, a primary, a follower, or "
        "inspect and query a log. Every option can also be set by its SWA_ES_* variable.",
    )
    _add_global_flags(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"swa_es.cli.{name}")
        except ModuleNotFoundError as exc:
            missing = missing_extra(exc)
            if missing is None:
                raise
            _add_unavailable(sub, name, missing)
            continue
        module.add_parser(sub)
        _add_global_flags(sub.choices[name], AFTER)
    return parser


def _add_unavailable(subparsers: Any, name: str, missing: MissingExtraError) -> None:
    """Declare ``name`` as a command whose optional dependencies are not installed: it takes any
    arguments and fails with ``missing``'s message, so the other commands still work."""
    command = subparsers.add_parser(
        name,
        help=f"(not installed: {install_hint(missing.extra)})",
        add_help=False,
        prefix_chars="\0",  # every argument, flags included, is taken as is
    )
    command.add_argument("arguments", nargs=argparse.REMAINDER)

    def fail(_config: object) -> int:
        raise missing

    command.set_defaults(configure=lambda _args: None, run=fail)


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _fail(prog: str, message: str, status: int) -> int:
    sys.stderr.write(f"{prog}: error: {message}\n")
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``swa-es``; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        return _fail("swa-es", str(exc), EXIT_USAGE)
    if args.version or getattr(args, "version" + AFTER, False):
        print(version())
        return EXIT_OK
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    verbose = args.verbose + getattr(args, "verbose" + AFTER, 0)
    logging.basicConfig(
        level=(logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)],
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if verbose == 0:
        # aiokafka logs each failed connection attempt itself; the error line says it once.
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    prog = f"swa-es {args.command}"
    try:
        config = args.configure(vars(args))
        status: int = args.run(config)
        return status
    except KeyboardInterrupt:
        return _fail(prog, "interrupted", EXIT_INTERRUPTED)
    except BaseException as exc:
        if verbose >= 2:
            raise
        return _report(prog, _leaf(exc))


def _report(prog: str, exc: BaseException) -> int:
    """One line for ``exc`` and the exit status it maps to."""
    from consumers.errors import ForeignSnapshotError
    from log import ConfigError, LogError
    from swa_es.engine.engine import DeviceUnavailableError
    from swa_es.service.errors import ServiceError

    if isinstance(exc, KeyboardInterrupt):
        return _fail(prog, "interrupted", EXIT_INTERRUPTED)
    missing = missing_extra(exc)
    if missing is not None:
        return _fail(prog, str(missing), EXIT_FAILED)
    if isinstance(exc, DeviceUnavailableError):
        exc = SettingError("--device", str(exc))  # the engine knows no flags; the CLI names it
    if isinstance(exc, SettingError | ConfigError):
        return _fail(prog, str(exc), EXIT_USAGE)
    if isinstance(exc, LogError | ForeignSnapshotError | ServiceError):
        return _fail(prog, str(exc), EXIT_FAILED)
    if isinstance(exc, SystemExit):
        return int(exc.code) if isinstance(exc.code, int) else EXIT_FAILED
    return _fail(prog, f"{type(exc).__name__}: {exc}", EXIT_FAILED)
