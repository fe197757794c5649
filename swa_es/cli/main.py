"""The ``swa-es`` command line: ``demo``, ``serve``, ``follow``, ``inspect``, ``route``,
``snapshot``, ``restore`` and ``bench``.

Every option can also come from an ``SWA_ES_*`` variable (flags win). Errors are one line on
stderr: exit status 2 for bad usage or configuration, 1 for a failed run, a failed verification
or a corrupt log, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any, Final, NoReturn

from swa_es.cli.config import SettingError, env_name

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_INTERRUPTED: Final = 130


class UsageError(Exception):
    """Bad command-line usage (argparse's complaints, made one line)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def _option(parser: argparse.ArgumentParser, name: str, help_text: str, **kwargs: Any) -> None:
    """An option whose value may also come from its ``SWA_ES_*`` variable."""
    parser.add_argument(
        "--" + name, default=None, help=f"{help_text} [env {env_name(name)}]", **kwargs
    )


def _cache_options(parser: argparse.ArgumentParser) -> None:
    _option(parser, "window", "sliding window in tokens (default 256)", metavar="TOKENS")
    _option(parser, "page-size", "tokens per page (default 16)", metavar="TOKENS")
    _option(parser, "full-size", "full KV pool slots per worker (default 32768)", metavar="N")
    _option(parser, "swa-size", "SWA KV pool slots per worker (default 8192)", metavar="N")
    _option(parser, "device", "torch device: cpu, cuda, cuda:N (default cpu)")
    _option(parser, "seed", "workload seed (default 0)", metavar="N")


def _timeout_option(parser: argparse.ArgumentParser) -> None:
    _option(parser, "open-timeout", "seconds to wait for the log (default 20)", metavar="S")


def _log_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "log",
        nargs="?",
        default=None,
        help="log URL (file:///dir, kafka://host:port/topic) or a directory "
        f"[env {env_name('log')}]",
    )


def _add_demo(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="simulated workers + follower, verified (the first command)",
        description="Run W simulated serving workers publishing to a log, a "
        "follower beside them, a live view, and verify replica == primary (exit 1 if not). "
        "Each run starts from an empty DATA/log and DATA/snapshots.",
    )
    _option(p, "data", "data directory (default: the user cache dir)", metavar="DIR")
    _option(p, "log", "log URL instead of DATA/log, e.g. kafka://localhost:9092/demo")
    _option(p, "workers", "simulated workers (default 2)", metavar="N")
    _option(p, "duration", "seconds to serve (default 10)", metavar="S")
    _option(p, "refresh", "live view refresh period in seconds (default 0.5)", metavar="S")
    _cache_options(p)
    _timeout_option(p)


def _add_serve(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="one primary worker loop publishing to a log",
        description="Serve the synthetic workload on one cache and publish its "
        "events. Stops after --duration / --requests, or on SIGTERM/SIGINT.",
    )
    _option(p, "log", "log URL (required)")
    _option(p, "source", "source id, the record key (default worker-0)")
    _option(p, "duration", "seconds to serve, then flush and exit", metavar="S")
    _option(p, "requests", "requests to serve, then flush and exit", metavar="N")
    _option(p, "rate", "requests per second (default: as fast as it goes)", metavar="RPS")
    _metrics_options(p)
    _cache_options(p)
    _timeout_option(p)


def _metrics_options(p: argparse.ArgumentParser) -> None:
    _option(p, "metrics-host", "address of /metrics and /healthz (default 0.0.0.0)")
    _option(p, "metrics-port", "port of /metrics and /healthz (default: none; 0 = any)")
    _option(p, "status-file", "JSON status file, replaced atomically", metavar="PATH")
    _option(p, "status-every", "status file period in seconds (default 1)", metavar="S")


def _add_follow(sub: Any) -> None:
    p = sub.add_parser(
        "follow",
        help="long-running follower with snapshots and /metrics",
        description="Restore the newest snapshot, replay the tail, then apply live "
        "records; serve Prometheus /metrics and /healthz.",
    )
    _option(p, "log", "log URL (required)")
    _option(p, "snapshots", "snapshot directory (default: no snapshots)", metavar="DIR")
    _option(p, "snapshot-every-batches", "snapshot every N batches (default 1000)", metavar="N")
    _option(p, "snapshot-every", "snapshot every S seconds (default 30)", metavar="S")
    _option(p, "keep-snapshots", "snapshots kept (default 3)", metavar="K")
    _option(p, "duration", "seconds to follow, then exit (default: forever)", metavar="S")
    _metrics_options(p)
    _timeout_option(p)


def _add_inspect(sub: Any) -> None:
    p = sub.add_parser(
        "inspect",
        help="verify every record and print batches as JSON lines",
        description="Decode every record strictly; print each batch as one JSON "
        "line on stdout, problems on stderr; exit 1 if any record is bad.",
    )
    _log_argument(p)
    _option(p, "from", "start position: N (partition 0) or P:N,P:N", metavar="POS")
    _option(p, "source", "print only this source's batches")
    _option(p, "limit", "print at most N batches", metavar="N")
    p.add_argument("--brief", action="store_true", help="event counts instead of events")
    _timeout_option(p)


def _add_route(sub: Any) -> None:
    p = sub.add_parser(
        "route",
        help="answer a prefix query from the log's views",
        description="Restore views from the log (and snapshots), then print per "
        "source the cached and SWA-usable prefix length of --tokens.",
    )
    _log_argument(p)
    _option(p, "tokens", "token ids: '1,2,3', '1 2 3' or '0..512' (required)", metavar="IDS")
    _option(p, "extra-key", "namespace (LoRA adapter / cache salt)", metavar="KEY")
    _option(p, "snapshots", "snapshot directory to restore from first", metavar="DIR")
    _timeout_option(p)


def _add_snapshots(sub: Any) -> None:
    for name, text in (
        ("snapshot", "catch up on a log and write a snapshot of its views"),
        ("restore", "restore views from the newest snapshot plus the log tail"),
    ):
        p = sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        _log_argument(p)
        _option(p, "snapshots", "snapshot directory (required)", metavar="DIR")
        _timeout_option(p)


def _add_bench(sub: Any) -> None:
    p = sub.add_parser(
        "bench",
        help="run the benchmarks in bench/",
        description="Run bench/<NAME>_bench.py with the remaining arguments.",
    )
    p.add_argument("name", nargs="?", default="all", help="cache, log, replica or all")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the benchmark")


def build_parser() -> argparse.ArgumentParser:
    """The ``swa-es`` argument parser."""
    parser = _Parser(
        prog="swa-es",
        description="Event-sourced SWA radix KV cache: run the demo, a primary, a follower, or "
        "inspect and query a log. Every option can also be set by its SWA_ES_* variable.",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="more logging (-vv: debug, with tracebacks)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for add in (
        _add_demo,
        _add_serve,
        _add_follow,
        _add_inspect,
        _add_route,
        _add_snapshots,
        _add_bench,
    ):
        add(sub)
    return parser


def _command(name: str) -> Callable[[dict[str, object]], int]:
    """The runner of a command, imported on demand (``--help`` stays fast, torch stays out)."""
    from swa_es.cli import commands

    return commands.RUNNERS[name]


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
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(
        level=(logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)],
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.verbose == 0:
        # aiokafka logs each failed connection attempt itself; the error line says it once.
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    prog = f"swa-es {args.command}"
    try:
        return _command(args.command)(vars(args))
    except KeyboardInterrupt:
        return _fail(prog, "interrupted", EXIT_INTERRUPTED)
    except BaseException as exc:
        if args.verbose >= 2:
            raise
        return _report(prog, _leaf(exc))


def _report(prog: str, exc: BaseException) -> int:
    """One line for ``exc`` and the exit status it maps to."""
    from log import ConfigError, LogError
    from swa_es.engine.engine import DeviceUnavailableError

    if isinstance(exc, KeyboardInterrupt):
        return _fail(prog, "interrupted", EXIT_INTERRUPTED)
    if isinstance(exc, DeviceUnavailableError):
        exc = SettingError("--device", str(exc))  # the engine knows no flags; the CLI names it
    if isinstance(exc, SettingError | ConfigError):
        return _fail(prog, str(exc), EXIT_USAGE)
    if isinstance(exc, LogError):
        return _fail(prog, str(exc), EXIT_FAILED)
    if isinstance(exc, SystemExit):
        return int(exc.code) if isinstance(exc.code, int) else EXIT_FAILED
    return _fail(prog, f"{type(exc).__name__}: {exc}", EXIT_FAILED)
