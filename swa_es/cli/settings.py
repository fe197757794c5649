"""Every ``swa-es`` setting, declared once: the ``SETTINGS`` table.

One ``Setting(name, parse, default, help, commands)`` row gives a command its ``--name`` option
(or its positional argument), the ``SWA_ES_NAME`` variable it may come from instead, its parser
and default, the help line (which shows the default: no help text elsewhere states one) and the
row of the configuration table in ``docs/configuration.md`` (``configuration_table()``; a test
holds the document equal to it). Precedence: the flag, then the variable, then the default. This
is the only module that reads ``SWA_ES_*`` variables.

A command's values arrive as one frozen config object: ``build_config`` resolves every row
listed for the command and passes it to the config class as the keyword ``attr`` (the setting's
name in snake case unless the row says otherwise).

**Adding a flag**: add one row here, listing the commands that take it, and the field named by
its ``attr`` to each of those commands' config classes (``tests/swa_es/test_cli_settings.py``
fails, naming the field, until both agree); regenerate the table of ``docs/configuration.md`` with
``.venv/bin/python tools/settings_table.py``.

**Adding a command**: write ``swa_es/cli/<command>.py`` with a frozen config class, ``run(config)
-> int`` and ``add_parser(subparsers)`` (which calls ``add_command`` here), list its name in the
rows it takes, and add the module to ``COMMANDS`` in ``swa_es/cli/main.py``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from functools import partial
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

from platformdirs import user_cache_dir

from cache.events import DEFAULT_MAX_RECORD_BYTES
from swa_es.cli import values as v
from swa_es.cli.values import SettingError

T = TypeVar("T")
C = TypeVar("C")

ENV_PREFIX: Final = "SWA_ES_"


class _Required:
    """The default of a setting that must be given (by flag, positional or variable)."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Final = _Required()

ALL_BUT_BENCH: Final = (
    "demo",
    "serve",
    "follow",
    "inspect",
    "route",
    "snapshot",
    "restore",
    "bridge",
)
READS_A_LOG: Final = ("inspect", "route", "snapshot", "restore")
"""Commands that take the log as a positional ``LOG`` argument."""


def env_name(setting: str) -> str:
    """The environment variable of a setting: ``page-size`` -> ``SWA_ES_PAGE_SIZE``."""
    return ENV_PREFIX + setting.upper().replace("-", "_")


def default_data_dir() -> Path:
    """Where the demo keeps its log and snapshots unless told otherwise."""
    return Path(user_cache_dir("swa-es")) / "demo"


@dataclass(frozen=True, slots=True)
class Setting(Generic[T]):
    """One setting of one or more commands.

    ``default`` is the value when neither flag nor variable is given (``REQUIRED``: one must
    be; ``None``: the setting is off). ``shown_default`` replaces the default's text in help
    and docs/configuration.md where the value itself says too little (``None`` meaning "no limit").
    ``positional_in`` lists the commands taking it as a positional argument.
    """

    name: str
    parse: Callable[[str, str], T]
    default: T | _Required | None
    help: str
    commands: tuple[str, ...]
    metavar: str | None = None
    attr: str | None = None
    shown_default: str | None = None
    positional_in: tuple[str, ...] = ()

    @property
    def env(self) -> str:
        """Its ``SWA_ES_*`` variable."""
        return env_name(self.name)

    @property
    def field(self) -> str:
        """The config-class field it fills."""
        return self.attr or self.name.replace("-", "_")

    @property
    def dest(self) -> str:
        """Where argparse keeps the flag's value."""
        return self.name.replace("-", "_")

    @property
    def is_switch(self) -> bool:
        """A flag without a value (``--brief``)."""
        return self.parse is v.boolean

    def where(self, command: str) -> str:
        """How the user names it on ``command``'s command line."""
        return self.name.upper() if command in self.positional_in else "--" + self.name

    def default_text(self) -> str:
        """The default as help and docs/configuration.md show it."""
        if self.shown_default is not None:
            return self.shown_default
        if self.default is REQUIRED:
            return "required"
        if isinstance(self.default, float):
            return f"{self.default:g}"
        return str(self.default)


_CACHE: Final = ("demo", "serve")

SETTINGS: Final[tuple[Setting[Any], ...]] = (
    # --- where the log is ---
    Setting(
        "log",
        v.log_url,
        REQUIRED,
        "log URL (file:///dir, kafka://host:port/topic) or a directory (a FileLog there)",
        ("serve", "follow", "bridge", *READS_A_LOG),
        metavar="URL",
        attr="log_url",
        positional_in=READS_A_LOG,
    ),
    Setting(
        "log",
        v.log_url,
        None,
        "log URL instead of DATA/log, e.g. kafka://localhost:9092/demo",
        ("demo",),
        metavar="URL",
        attr="log_url",
        shown_default="DATA/log",
    ),
    Setting(
        "open-timeout",
        v.positive_float,
        20.0,
        "seconds to wait for the log to open",
        ALL_BUT_BENCH,
        metavar="S",
        attr="open_timeout_s",
    ),
    # --- the demo ---
    Setting(
        "data",
        v.path,
        default_data_dir(),
        "demo data directory, holding log/ and snapshots/",
        ("demo",),
        metavar="DIR",
        attr="data_dir",
        shown_default="the user cache dir's swa-es/demo",
    ),
    Setting("workers", v.positive_int, 2, "simulated workers", ("demo",), metavar="N"),
    Setting(
        "duration",
        v.positive_float,
        10.0,
        "seconds to serve",
        ("demo",),
        metavar="S",
        attr="duration_s",
    ),
    Setting(
        "refresh",
        v.positive_float,
        0.5,
        "live view refresh period in seconds",
        ("demo",),
        metavar="S",
        attr="refresh_s",
    ),
    # --- one primary's cache and workload ---
    Setting(
        "window",
        v.positive_int,
        256,
        "sliding window in tokens",
        _CACHE,
        metavar="TOKENS",
        attr="window_tokens",
    ),
    Setting("page-size", v.positive_int, 16, "tokens per page", _CACHE, metavar="TOKENS"),
    Setting("full-size", v.positive_int, 32768, "full KV pool slots per worker", _CACHE, "N"),
    Setting("swa-size", v.positive_int, 8192, "SWA KV pool slots per worker", _CACHE, "N"),
    Setting("device", v.device, "cpu", "torch device: cpu, cuda or cuda:N", _CACHE, "DEV"),
    Setting(
        "seed", v.non_negative_int, 0, "workload seed (demo worker i uses seed+i)", _CACHE, "N"
    ),
    # --- serve ---
    Setting("source", v.text_value, "worker-0", "source id, the record key", ("serve",), "ID"),
    Setting(
        "source",
        v.text_value,
        REQUIRED,
        "source id of the engine, the record key",
        ("bridge",),
        "ID",
    ),
    Setting(
        "duration",
        v.positive_float,
        None,
        "seconds to run, then flush and exit",
        ("serve", "follow", "bridge"),
        metavar="S",
        attr="duration_s",
        shown_default="no limit",
    ),
    Setting(
        "requests",
        v.positive_int,
        None,
        "requests to serve, then flush and exit",
        ("serve",),
        metavar="N",
        attr="max_requests",
        shown_default="no limit",
    ),
    Setting(
        "rate",
        v.positive_float,
        None,
        "requests per second",
        ("serve",),
        metavar="RPS",
        attr="rate_rps",
        shown_default="as fast as it goes",
    ),
    # --- liveness ---
    Setting(
        "heartbeat-s",
        v.positive_float,
        5.0,
        "append a heartbeat after S seconds without a record, so followers tell an idle "
        "source from a dead one",
        ("serve", "bridge"),
        metavar="S",
    ),
    Setting(
        "engine-timeout-s",
        v.positive_float,
        10.0,
        "declare the engine offline in the log once neither its stream nor its replay socket "
        "was heard for S seconds",
        ("bridge",),
        metavar="S",
    ),
    Setting(
        "source-timeout-s",
        v.positive_float,
        15.0,
        "answer a source unheard for S seconds (no batch, no heartbeat) as offline",
        ("follow",),
        metavar="S",
    ),
    Setting(
        "degraded-lag-records",
        v.positive_int,
        10_000,
        "answer sources as degraded while the follower is more than N records behind the log",
        ("follow",),
        metavar="N",
    ),
    # --- what a service reports ---
    Setting(
        "metrics-host",
        v.text_value,
        "127.0.0.1",
        "address of /metrics and /healthz (0.0.0.0: every interface, as compose sets it)",
        ("serve", "follow", "bridge"),
        metavar="HOST",
    ),
    Setting(
        "metrics-port",
        v.port,
        None,
        "port of /metrics and /healthz; 0 picks a free one",
        ("serve", "follow", "bridge"),
        metavar="PORT",
        shown_default="off",
    ),
    Setting(
        "status-file",
        v.path,
        None,
        "JSON status file, replaced atomically",
        ("serve", "follow"),
        metavar="PATH",
        shown_default="off",
    ),
    Setting(
        "status-every",
        v.positive_float,
        1.0,
        "status file period in seconds",
        ("serve", "follow"),
        metavar="S",
        attr="status_every_s",
    ),
    # --- snapshots ---
    Setting(
        "snapshots",
        v.snapshot_store,
        None,
        "snapshot store, a directory or kafka://HOST:PORT/TOPIC?group=NAME (a compacted topic "
        "shared by followers on any machine): follow and route restore from it first, follow "
        "writes there",
        ("follow", "route"),
        metavar="STORE",
        shown_default="none",
    ),
    Setting(
        "snapshots",
        v.snapshot_store,
        REQUIRED,
        "snapshot store: a directory or a kafka:// URL",
        ("snapshot", "restore"),
        metavar="STORE",
    ),
    Setting(
        "verify-snapshots",
        v.snapshot_store,
        None,
        "list and verify the snapshots of this store (a directory or a kafka:// URL) instead "
        "of the log's records",
        ("inspect",),
        metavar="STORE",
        attr="snapshots",
        shown_default="none",
    ),
    Setting(
        "snapshot-every-batches",
        v.positive_int,
        1000,
        "snapshot every N applied batches",
        ("follow",),
        metavar="N",
    ),
    Setting(
        "snapshot-every",
        v.positive_float,
        30.0,
        "snapshot every S seconds if something was applied",
        ("follow",),
        metavar="S",
        attr="snapshot_every_s",
    ),
    Setting("keep-snapshots", v.positive_int, 3, "snapshots kept", ("follow",), metavar="K"),
    Setting(
        "max-record-bytes",
        v.positive_int,
        DEFAULT_MAX_RECORD_BYTES,
        "largest record decoded; a bigger one is counted as undecodable and skipped",
        ("follow",),
        metavar="BYTES",
        shown_default="16 MiB",
    ),
    # --- inspect ---
    Setting(
        "from",
        v.position,
        None,
        "start position: N (partition 0) or P:N,P:N",
        ("inspect",),
        metavar="POS",
        attr="start",
        shown_default="the beginning",
    ),
    Setting(
        "source",
        v.text_value,
        None,
        "print only this source's batches",
        ("inspect",),
        metavar="ID",
        shown_default="every source",
    ),
    Setting(
        "limit",
        v.positive_int,
        None,
        "print at most N batches",
        ("inspect",),
        metavar="N",
        shown_default="no limit",
    ),
    Setting("brief", v.boolean, False, "event counts instead of events", ("inspect",)),
    # --- route ---
    Setting(
        "tokens",
        v.token_list,
        REQUIRED,
        "token ids: '1,2,3', '1 2 3' or '0..512'",
        ("route",),
        metavar="IDS",
    ),
    Setting(
        "extra-key",
        v.text_value,
        None,
        "namespace (LoRA adapter / cache salt)",
        ("route",),
        metavar="KEY",
        shown_default="none",
    ),
    # --- bridge: an engine's ZMQ KV-event stream into the log ---
    Setting(
        "zmq",
        v.zmq_endpoint,
        REQUIRED,
        "the engine's KV-event PUB endpoint to subscribe to",
        ("bridge",),
        metavar="ENDPOINT",
        attr="endpoint",
    ),
    Setting(
        "replay",
        v.zmq_endpoint,
        None,
        "the engine's replay (ROUTER) endpoint; without it gaps cannot be filled",
        ("bridge",),
        metavar="ENDPOINT",
        attr="replay_endpoint",
        shown_default="none",
    ),
    Setting(
        "format",
        v.choice("sglang", "vllm", "auto"),
        "auto",
        "the engine's wire format: sglang, vllm or auto",
        ("bridge",),
        metavar="FMT",
        attr="wire_format",
    ),
    Setting(
        "page-size",
        v.positive_int,
        None,
        "the engine's block size, for the epoch meta until the first stored block says it",
        ("bridge",),
        metavar="TOKENS",
        shown_default="learned from the stream",
    ),
    Setting(
        "replay-timeout",
        v.positive_float,
        5.0,
        "seconds to wait for the engine's replay answer",
        ("bridge",),
        metavar="S",
        attr="replay_timeout_s",
    ),
    # --- follow: the routing API and the ZMQ stream out ---
    Setting(
        "http-host",
        v.text_value,
        "127.0.0.1",
        "address of the routing API (/v1/match, /v1/sources, /metrics, /healthz)",
        ("follow",),
        metavar="HOST",
    ),
    Setting(
        "http-port",
        v.port,
        None,
        "port of the routing API; 0 picks a free one",
        ("follow",),
        metavar="PORT",
        shown_default="off",
    ),
    Setting(
        "http-max-request-bytes",
        v.positive_int,
        4 * 1024 * 1024,
        "largest request body the routing API reads (413 beyond)",
        ("follow",),
        metavar="N",
    ),
    Setting(
        "zmq-publish",
        v.zmq_endpoint,
        None,
        "PUB endpoint to republish every source's batches on, in --zmq-format (topic = source)",
        ("follow",),
        metavar="ENDPOINT",
        shown_default="off",
    ),
    Setting(
        "zmq-replay",
        v.zmq_endpoint,
        None,
        "ROUTER endpoint answering replay requests from the durable log",
        ("follow",),
        metavar="ENDPOINT",
        shown_default="off",
    ),
    Setting(
        "zmq-format",
        v.choice("sglang", "vllm"),
        "sglang",
        "wire format of the ZMQ stream out: sglang or vllm",
        ("follow",),
        metavar="FMT",
    ),
    Setting(
        "zmq-tombstones",
        v.choice("keep", "remove", "groups", "events"),
        "keep",
        "what a tombstone (SWA KV freed, full KV kept) becomes on the ZMQ stream out: keep "
        "(nothing is sent; the block stays cached for the consumer, as sglang's own stream "
        "says), remove (BlockRemoved; a later SWA restore is not sent), groups (with "
        "--zmq-format vllm: a vLLM hybrid model's full-attention and sliding-window groups) "
        "or events (with --zmq-format sglang: swa-es's sglang SWA residency events)",
        ("follow",),
        metavar="MODE",
    ),
    Setting(
        "zmq-snapshot",
        v.zmq_endpoint,
        None,
        "ROUTER endpoint answering routers' snapshot requests (vLLM's proposed \"snapshot\") "
        "for the --zmq-publish stream: the follower's state with a cut on that stream's seq",
        ("follow",),
        metavar="ENDPOINT",
        shown_default="off",
    ),
)


def settings_of(command: str) -> list[Setting[Any]]:
    """The rows ``command`` takes, in table order."""
    return [s for s in SETTINGS if command in s.commands]


# --- argparse ----------------------------------------------------------------------------------


def help_line(setting: Setting[Any]) -> str:
    """A setting's ``--help`` line: its text, its default and its variable."""
    if setting.is_switch:
        default = ""
    elif setting.default is REQUIRED:
        default = " (required)"
    else:
        default = f" (default: {setting.default_text()})"
    return f"{setting.help}{default} [env {setting.env}]"


def add_options(parser: argparse.ArgumentParser, command: str) -> None:
    """Give ``parser`` an option (or positional argument) per setting of ``command``.

    Every value is left ``None`` when not given, so ``build_config`` can tell a flag from the
    variable and the default.
    """
    for setting in settings_of(command):
        if command in setting.positional_in:
            parser.add_argument(
                setting.dest, nargs="?", default=None, metavar=setting.name.upper(),
                help=help_line(setting),
            )  # fmt: skip
        elif setting.is_switch:
            parser.add_argument(
                "--" + setting.name, dest=setting.dest, action="store_const", const="1",
                default=None, help=help_line(setting),
            )  # fmt: skip
        else:
            parser.add_argument(
                "--" + setting.name, dest=setting.dest, default=None, metavar=setting.metavar,
                help=help_line(setting),
            )  # fmt: skip


Run = Callable[[Any], int]
Configure = Callable[[Mapping[str, object]], object]


def add_command(
    subparsers: Any,
    name: str,
    *,
    help: str,
    description: str,
    config_type: type[Any] | None,
    run: Run,
    configure: Configure | None = None,
) -> argparse.ArgumentParser:
    """Add command ``name`` with its settings' options; the parsed flags become a
    ``config_type`` (through ``build_config``, or ``configure`` when given) handed to ``run``.
    Returns the sub-parser, for arguments that are not settings (``bench``'s script args)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, help=help, description=description
    )
    add_options(parser, name)
    if configure is None:
        assert config_type is not None, "a command needs a config_type or a configure function"
        configure = partial(build_config, name, config_type)
    parser.set_defaults(configure=configure, run=run)
    return parser


# --- values ------------------------------------------------------------------------------------


def process_env() -> dict[str, str]:
    """This process's ``SWA_ES_*`` variables (the only place they are read)."""
    return {k: val for k, val in os.environ.items() if k.startswith(ENV_PREFIX)}


def value_of(
    setting: Setting[T], command: str, flags: Mapping[str, object], env: Mapping[str, str]
) -> T | None:
    """The setting's value for ``command``: its flag, else its variable, else its default."""
    flag = flags.get(setting.dest)
    if flag is not None:
        return setting.parse(str(flag), setting.where(command))
    if setting.env in env:
        return setting.parse(env[setting.env], setting.env)
    if isinstance(setting.default, _Required):
        raise SettingError(setting.where(command), f"is required (or set {setting.env})")
    return setting.default


def resolve(
    command: str, flags: Mapping[str, object], env: Mapping[str, str] | None = None
) -> dict[str, object]:
    """Every setting of ``command``, keyed by config field; ``env=None`` reads the process's."""
    env = process_env() if env is None else env
    return {s.field: value_of(s, command, flags, env) for s in settings_of(command)}


def build_config(
    command: str,
    config_type: type[C],
    flags: Mapping[str, object],
    env: Mapping[str, str] | None = None,
) -> C:
    """``command``'s frozen config: ``config_type`` built from ``resolve``'s values."""
    return config_type(**resolve(command, flags, env))


def config_fields(config_type: type[Any]) -> set[str]:
    """The field names of a config dataclass (for the table-agrees-with-configs test)."""
    return {f.name for f in fields(config_type)}


# --- docs/configuration.md -------------------------------------------------------------------


def configuration_table(settings: Iterable[Setting[Any]] = SETTINGS) -> str:
    """The configuration table of ``docs/configuration.md`` (markdown), one line per row of
    ``SETTINGS``."""
    lines = [
        "| variable | flag | meaning (default) | commands |",
        "|---|---|---|---|",
    ]
    for s in settings:
        named = [] if set(s.commands) <= set(s.positional_in) else [f"`--{s.name}`"]
        if s.positional_in:
            named.append(f"`{s.name.upper()}` ({', '.join(s.positional_in)})")
        default = "" if s.is_switch else f" ({s.default_text()})"
        meaning = f"{s.help}{default}".replace("|", "\\|")
        lines.append(f"| `{s.env}` | {', '.join(named)} | {meaning} | {', '.join(s.commands)} |")
    return "\n".join(lines) + "\n"
