"""Options that several commands take, each declared once: groups (``LogAccess``,
``MetricsEndpoint``) that a command's config nests with ``nested(...)``, and single options
(``Opt``) that a config declares a field of with ``field_of(OPT)``. Options of one command only
are declared in its own module, beside its config's fields; the cache's are on ``CacheConfig``
and the stream out's on ``EgressConfig``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from swa_es.options import Opt, field_of, option
from swa_es.options import values as v

OPEN_TIMEOUT: Final = Opt(
    "open-timeout-s",
    v.positive_float,
    "seconds to wait for the log to open",
    default=20.0,
    metavar="S",
    old_flags=("open-timeout",),
    old_variables=("open-timeout",),
)
LOG: Final = Opt(
    "log",
    v.log_url,
    "log URL (file:///dir, kafka://host:port/topic) or a directory (a FileLog there)",
    metavar="URL",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class LogAccess:
    """The log a command reads or appends to, and how long it may take to open (the commands
    that only read it also take it as their first argument, ``LOG``, as they used to)."""

    url: str = field_of(LOG)
    open_timeout_s: float = field_of(OPEN_TIMEOUT)


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricsEndpoint:
    """Where a service serves ``/metrics`` and ``/healthz``."""

    host: str = option(
        "metrics-host",
        v.text_value,
        "address of /metrics and /healthz (0.0.0.0: every interface, as compose sets it)",
        default="127.0.0.1",
        metavar="HOST",
    )
    port: int | None = option(
        "metrics-port",
        v.port,
        "port of /metrics and /healthz; 0 picks a free one",
        default=None,
        metavar="PORT",
        shown_default="off",
    )


SEED: Final = Opt(
    "seed", v.non_negative_int, "workload seed (demo worker i uses seed+i)", 0, metavar="N"
)
SOURCE: Final = Opt("source", v.text_value, "source id, the record key", metavar="ID")
RUN_DURATION: Final = Opt(
    "duration-s",
    v.positive_float,
    "seconds to run, then flush and exit",
    default=None,
    metavar="S",
    shown_default="no limit",
    old_flags=("duration",),
    old_variables=("duration",),
)
HEARTBEAT: Final = Opt(
    "heartbeat-s",
    v.positive_float,
    "append a heartbeat after S seconds without a record, so followers tell an idle source "
    "from a dead one",
    default=5.0,
    metavar="S",
)
STATUS_FILE: Final = Opt(
    "status-file",
    v.path,
    "JSON status file, replaced atomically",
    default=None,
    metavar="PATH",
    shown_default="off",
)
STATUS_EVERY: Final = Opt(
    "status-every-s",
    v.positive_float,
    "status file period in seconds",
    1.0,
    metavar="S",
    old_flags=("status-every",),
    old_variables=("status-every",),
)
SNAPSHOTS: Final = Opt(
    "snapshots",
    v.snapshot_store,
    "snapshot store, a directory or kafka://HOST:PORT/TOPIC?group=NAME (a compacted topic "
    "shared by followers on any machine): follow, route and restore restore from it first; "
    "follow and snapshot write there (route and restore only with --write-snapshots)",
    default=None,
    metavar="STORE",
    shown_default="none",
)
WRITE_SNAPSHOTS: Final = Opt(
    "write-snapshots",
    v.boolean,
    "also write snapshots into --snapshots while replaying (every 1,000 batches, as a "
    "follower does) and pin the log for them; without it the store and the log are only read",
    default=False,
)
