"""Parsing and checking of ``kafka://host:port[,host:port]/topic?...`` URLs and their options.

Every option may come as a URL query parameter (a string) or a keyword argument of ``open_log``
(a typed value). A bad value raises ``ConfigError`` naming the option. Secrets (the SASL password)
never appear in ``KafkaOptions.url``.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlencode

from log.errors import ConfigError

_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):([0-9]{1,5})$")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class KafkaOptions:
    """Everything a ``KafkaLog`` needs to connect, create its topic and write."""

    bootstrap_servers: tuple[str, ...]
    topic: str
    partitions: int | None = None
    replication_factor: int = 1
    min_insync_replicas: int | None = None
    retention_ms: int = -1
    create_topic: bool = True
    transactional_id: str | None = None
    client_id: str = "swa-es"
    request_timeout_s: float = 30.0
    append_timeout_s: float = 120.0
    linger_ms: int = 2
    max_batch_bytes: int = 1024 * 1024
    max_record_bytes: int = 16 * 1024 * 1024
    poll_timeout_ms: int = 200
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_plain_username: str | None = None
    sasl_plain_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None

    @property
    def bootstrap(self) -> str:
        """The bootstrap servers as one comma-separated string."""
        return ",".join(self.bootstrap_servers)

    @property
    def url(self) -> str:
        """A ``kafka://`` URL for these options, without the SASL password."""
        shown: dict[str, str] = {}
        if self.partitions is not None:
            shown["partitions"] = str(self.partitions)
        if self.transactional_id is not None:
            shown["transactional_id"] = self.transactional_id
        if self.security_protocol != "PLAINTEXT":
            shown["security_protocol"] = self.security_protocol
        if self.sasl_mechanism is not None:
            shown["sasl_mechanism"] = self.sasl_mechanism
        if self.sasl_plain_username is not None:
            shown["sasl_plain_username"] = self.sasl_plain_username
        query = f"?{urlencode(shown)}" if shown else ""
        return f"kafka://{self.bootstrap}/{self.topic}{query}"

    def client_kwargs(self) -> dict[str, Any]:
        """Connection and security keyword arguments shared by aiokafka's producer, consumer and
        admin client."""
        kwargs: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            "client_id": self.client_id,
            "request_timeout_ms": int(self.request_timeout_s * 1000),
            "security_protocol": self.security_protocol,
        }
        if self.security_protocol in ("SSL", "SASL_SSL"):
            kwargs["ssl_context"] = self.ssl_context()
        if self.security_protocol.startswith("SASL_"):
            kwargs["sasl_mechanism"] = self.sasl_mechanism or "PLAIN"
            kwargs["sasl_plain_username"] = self.sasl_plain_username
            kwargs["sasl_plain_password"] = self.sasl_plain_password
        return kwargs

    def ssl_context(self) -> ssl.SSLContext:
        """A TLS context verifying the brokers against ``ssl_cafile`` (or the system store), with a
        client certificate when ``ssl_certfile`` is set."""
        context = ssl.create_default_context(cafile=self.ssl_cafile)
        if self.ssl_certfile is not None:
            context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
        return context


def _as_int(name: str, value: Any, *, minimum: int) -> int:
    if isinstance(value, bool):
        raise ConfigError(name, f"expected an integer, got {value!r}")
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise ConfigError(name, f"expected an integer, got {value!r}") from None
    if not isinstance(value, int):
        raise ConfigError(name, f"expected an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(name, f"must be at least {minimum}, got {value}")
    return value


def _as_seconds(name: str, value: Any) -> float:
    if isinstance(value, bool):
        raise ConfigError(name, f"expected a number of seconds, got {value!r}")
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ConfigError(name, f"expected a number of seconds, got {value!r}") from None
    if not seconds > 0 or seconds == float("inf"):
        raise ConfigError(name, f"must be a positive finite number of seconds, got {value!r}")
    return seconds


def _as_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on"):
        return True
    if isinstance(value, str) and value.lower() in ("0", "false", "no", "off"):
        return False
    raise ConfigError(name, f"expected true or false, got {value!r}")


def _as_text(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(name, f"expected a non-empty string, got {value!r}")
    return value


def _one_of(choices: tuple[str, ...]) -> Callable[[str, Any], str]:
    def parse(name: str, value: Any) -> str:
        text = _as_text(name, value).upper()
        if text not in choices:
            raise ConfigError(name, f"expected one of {', '.join(choices)}, got {value!r}")
        return text

    return parse


def _int_at_least(minimum: int) -> Callable[[str, Any], int]:
    def parse(name: str, value: Any) -> int:
        return _as_int(name, value, minimum=minimum)

    return parse


_PARSERS: dict[str, Callable[[str, Any], Any]] = {
    "partitions": _int_at_least(1),
    "replication_factor": _int_at_least(1),
    "min_insync_replicas": _int_at_least(1),
    "retention_ms": _int_at_least(-1),
    "create_topic": _as_bool,
    "transactional_id": _as_text,
    "client_id": _as_text,
    "request_timeout_s": _as_seconds,
    "append_timeout_s": _as_seconds,
    "linger_ms": _int_at_least(0),
    "max_batch_bytes": _int_at_least(1024),
    "max_record_bytes": _int_at_least(1024),
    "poll_timeout_ms": _int_at_least(1),
    "security_protocol": _one_of(SECURITY_PROTOCOLS),
    "sasl_mechanism": _one_of(SASL_MECHANISMS),
    "sasl_plain_username": _as_text,
    "sasl_plain_password": _as_text,
    "ssl_cafile": _as_text,
    "ssl_certfile": _as_text,
    "ssl_keyfile": _as_text,
}


def parse_bootstrap(netloc: str) -> tuple[str, ...]:
    """``host:port[,host:port]`` as a tuple of ``host:port`` strings."""
    if "@" in netloc:
        raise ConfigError("url", "put credentials in sasl_plain_username/password, not the host")
    servers = tuple(part.strip() for part in netloc.split(",") if part.strip())
    if not servers:
        raise ConfigError("url", "kafka:// needs at least one host:port")
    for server in servers:
        match = _HOST_PORT.match(server)
        if match is None or not 0 < int(match.group(2)) < 65536:
            raise ConfigError("url", f"expected host:port, got {server!r}")
    return servers


def parse_topic(path: str) -> str:
    """The topic named by the URL path ``/topic``."""
    topic = path.lstrip("/")
    if not _TOPIC.match(topic) or topic in (".", ".."):
        raise ConfigError(
            "topic", f"expected /<topic> with letters, digits, '.', '_' or '-', got {path!r}"
        )
    return topic


def _check_consistent(options: KafkaOptions) -> None:
    if options.min_insync_replicas is not None and (
        options.min_insync_replicas > options.replication_factor
    ):
        raise ConfigError(
            "min_insync_replicas",
            f"{options.min_insync_replicas} exceeds replication_factor "
            f"{options.replication_factor}: every append would fail",
        )
    sasl = options.security_protocol.startswith("SASL_")
    if sasl and (options.sasl_plain_username is None or options.sasl_plain_password is None):
        raise ConfigError(
            "sasl_plain_username",
            f"{options.security_protocol} needs sasl_plain_username and sasl_plain_password",
        )
    if not sasl and options.sasl_mechanism is not None:
        raise ConfigError(
            "sasl_mechanism", f"set, but security_protocol is {options.security_protocol}"
        )
    if options.ssl_keyfile is not None and options.ssl_certfile is None:
        raise ConfigError("ssl_keyfile", "set without ssl_certfile")


def parse_options(netloc: str, path: str, options: dict[str, Any]) -> KafkaOptions:
    """Check the URL parts and options of a ``kafka://`` log and return them typed."""
    values: dict[str, Any] = {}
    for name, raw in options.items():
        parser = _PARSERS.get(name)
        if parser is None:
            known = ", ".join(sorted(_PARSERS))
            raise ConfigError(name, f"unknown option for kafka:// (known: {known})")
        values[name] = parser(name, raw)
    parsed = KafkaOptions(
        bootstrap_servers=parse_bootstrap(netloc), topic=parse_topic(path), **values
    )
    _check_consistent(parsed)
    return parsed
