"""Options that several commands take, each declared once: groups (``LogAccess``,
``MetricsEndpoint``) that a command's config nests with ``nested(...)``, and single options
(``Opt``) that a config declares a field of with ``field_of(OPT)``. Options of one command only
are declared in its own module, beside its config's fields; the cache's are on ``CacheConfig``
and the stream out's on ``EgressConfig``. Every command that serves HTTP nests ``HttpAccess``
(tokens, TLS) and ``HttpBounds`` (timeouts, connections).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from swa_es.options import FieldError, Opt, field_of, option
from swa_es.options import values as v
from swa_es.options.values import SettingError
from swa_es.service.http_limits import (
    BODY_TIMEOUT_S,
    HEAD_TIMEOUT_S,
    KEEP_ALIVE_TIMEOUT_S,
    MAX_CONNECTIONS,
    HttpLimits,
)

if TYPE_CHECKING:
    from swa_es.service.http_auth import HttpSecurity

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


class Secret:
    """A setting's value that is never shown: its ``repr`` and ``str`` hide it (a config printed
    in a log or a traceback shows ``Secret(hidden)``); ``reveal`` gives it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The value itself."""
        return self._value

    def __repr__(self) -> str:
        return "Secret(hidden)"

    __str__ = __repr__


def secret_from_environment(text: str, where: str) -> Secret:
    """A secret, from its ``SWA_ES_*`` variable only: a flag's value is refused, since every
    user of the machine can read a process's command line (``ps``, ``/proc/PID/cmdline``)."""
    if where.startswith("--"):
        raise SettingError(
            where,
            "a secret on the command line is visible to every user of this machine (ps); "
            "set its SWA_ES_* variable or use --http-token-file",
        )
    if not text.strip():
        raise SettingError(where, "must not be empty")
    return Secret(text)


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpAccess:
    """Who may use a service's HTTP servers (the routing API and /metrics alike): bearer
    tokens, TLS, client certificates; ``security()`` loads them (``http_auth``)."""

    token_file: Path | None = option(
        "http-token-file",
        v.path,
        "file of the bearer tokens a request must present (Authorization: Bearer TOKEN; one "
        "a line, # comments), read again within a second of a change; /healthz, /readyz and "
        "/ui stay open",
        default=None,
        metavar="PATH",
        shown_default="none",
    )
    token: Secret | None = option(
        "http-token",
        secret_from_environment,
        "bearer tokens (separated by spaces), taken from the environment variable only: a "
        "flag's value shows in ps; prefer --http-token-file, which can rotate",
        default=None,
        metavar="TOKEN",
        shown_default="none",
    )
    tls_cert: Path | None = option(
        "http-tls-cert",
        v.path,
        "PEM certificate chain: serve HTTPS only (with --http-tls-key)",
        default=None,
        metavar="PATH",
        shown_default="none",
    )
    tls_key: Path | None = option(
        "http-tls-key",
        v.path,
        "PEM private key of --http-tls-cert",
        default=None,
        metavar="PATH",
        shown_default="none",
    )
    tls_client_ca: Path | None = option(
        "http-tls-client-ca",
        v.path,
        "PEM CA certificates: require a client certificate they signed (mutual TLS)",
        default=None,
        metavar="PATH",
        shown_default="none",
    )
    insecure: bool = option(
        "http-insecure",
        v.boolean,
        "serve an address other than the loopback without a token and TLS (refused without "
        "it; for a private test network such as the compose stack)",
        default=False,
    )

    def __post_init__(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            given, wanted = ("tls_cert", "--http-tls-key")
            if self.tls_cert is None:
                given, wanted = ("tls_key", "--http-tls-cert")
            raise FieldError(given, f"needs {wanted} too")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise FieldError("tls_client_ca", "needs --http-tls-cert and --http-tls-key")

    def security(self) -> HttpSecurity:
        """The tokens and TLS context these options name, loaded (a file that cannot be read
        or used is a ``SettingError`` naming its flag)."""
        from swa_es.service.http_auth import BearerTokens, HttpSecurity, server_tls_context

        tokens = None
        if self.token is not None or self.token_file is not None:
            given = [] if self.token is None else self.token.reveal().split()
            tokens = BearerTokens(given, self.token_file)
        tls = None
        if self.tls_cert is not None and self.tls_key is not None:
            tls = server_tls_context(self.tls_cert, self.tls_key, self.tls_client_ca)
        return HttpSecurity(tokens, tls, self.insecure)


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpBounds:
    """The bounds a service's HTTP servers put on their connections (each refusal counted in
    ``swa_es_http_refusals_total``)."""

    head_timeout_s: float = option(
        "http-head-timeout-s",
        v.positive_float,
        "seconds a connection has to send a whole request head (408 and closed after)",
        default=HEAD_TIMEOUT_S,
        metavar="S",
    )
    body_timeout_s: float = option(
        "http-body-timeout-s",
        v.positive_float,
        "seconds a request body has to arrive after its head (408 and closed after)",
        default=BODY_TIMEOUT_S,
        metavar="S",
    )
    keep_alive_timeout_s: float = option(
        "http-keep-alive-timeout-s",
        v.positive_float,
        "seconds an idle kept-alive connection stays open",
        default=KEEP_ALIVE_TIMEOUT_S,
        metavar="S",
    )
    max_connections: int = option(
        "http-max-connections",
        v.positive_int,
        "connections open at once per server (one more is answered 503 and closed)",
        default=MAX_CONNECTIONS,
        metavar="N",
    )

    def limits(self) -> HttpLimits:
        """These bounds as the server takes them."""
        return HttpLimits(
            self.head_timeout_s,
            self.body_timeout_s,
            self.keep_alive_timeout_s,
            self.max_connections,
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
NO_TOKEN_IDS: Final = Opt(
    "no-token-ids",
    v.boolean,
    "token-free deployment: no prompt's token ids reach the log or any socket. A writer "
    "(bridge, serve, demo) writes every BlockStored without its token ids (its hashes, block "
    "size and pages as ever) and says so in each epoch's meta; follow refuses --zmq-publish, "
    "which sends token ids. Matches, digests and snapshots are unchanged (docs/security.md)",
    default=False,
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
