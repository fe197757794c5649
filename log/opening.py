"""``open_log(url, **options)``: pick the backend from the URL scheme and open it.

The schemes are a registry (``LogScheme``, ``register_scheme``): ``file``, ``kafka`` and
``memory`` are registered here, each importing its backend only when a log of it is opened
(``kafka`` needs the optional aiokafka). ``log_schemes()`` is what every other place that names
the schemes reads (the command line's check of a ``--log`` value, the errors below), so a new
backend is one ``register_scheme`` call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeAlias
from urllib.parse import parse_qsl, urlsplit

from log.base import EventLog
from log.errors import ConfigError
from log.memory import MemoryLog

LogOpener: TypeAlias = Callable[[str, str, dict[str, Any]], Awaitable[EventLog]]
"""Opens a log from a URL's ``(netloc, path, options)``; options it does not know are a
``ConfigError`` naming them."""


@dataclass(frozen=True, slots=True)
class LogScheme:
    """One kind of log ``open_log`` opens: URLs ``name://...`` (``form`` shows one)."""

    name: str
    form: str
    open: LogOpener


_SCHEMES: dict[str, LogScheme] = {}


def register_scheme(scheme: LogScheme) -> None:
    """Let ``open_log`` open ``scheme.name://`` URLs; a name registered twice is a
    ``ValueError``."""
    if scheme.name in _SCHEMES:
        raise ValueError(f"log scheme {scheme.name!r} is already registered")
    _SCHEMES[scheme.name] = scheme


def log_schemes() -> tuple[LogScheme, ...]:
    """Every registered scheme, in registration order."""
    return tuple(_SCHEMES.values())


def _expected() -> str:
    return ", ".join(scheme.form for scheme in _SCHEMES.values())


def split_options(url: str, options: dict[str, Any]) -> tuple[str, str, str, dict[str, Any]]:
    """(scheme, netloc, path, options) of ``url``; keyword options override query parameters."""
    parts = urlsplit(url)
    if not parts.scheme:
        raise ConfigError("url", f"{url!r} has no scheme (expected {_expected()})")
    query: dict[str, Any] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True, strict_parsing=False):
        if name in query:
            raise ConfigError(name, f"given twice in {url!r}")
        query[name] = value
    query.update(options)
    return parts.scheme, parts.netloc, parts.path, query


async def open_log(url: str, **options: Any) -> EventLog:
    """Open the log at ``url`` (``file:///dir``, ``kafka://host:port[,host:port]/topic``,
    ``memory://name``, or any registered scheme); options come as query parameters or keyword
    arguments."""
    scheme, netloc, path, merged = split_options(url, options)
    found = _SCHEMES.get(scheme)
    if found is None:
        raise ConfigError("url", f"unknown scheme {scheme!r} in {url!r} (expected {_expected()})")
    return await found.open(netloc, path, merged)


async def _open_file(netloc: str, path: str, options: dict[str, Any]) -> EventLog:
    from log.file import FileLog

    return await FileLog.open_url(netloc, path, options)


async def _open_kafka(netloc: str, path: str, options: dict[str, Any]) -> EventLog:
    from log.kafka import KafkaLog

    return await KafkaLog.open_url(netloc, path, options)


async def _open_memory(netloc: str, path: str, options: dict[str, Any]) -> EventLog:
    partitions = options.pop("partitions", 1)
    if options:
        raise ConfigError(sorted(options)[0], "unknown option for memory://")
    try:
        count = int(partitions)
    except (TypeError, ValueError):
        raise ConfigError("partitions", f"expected an int, got {partitions!r}") from None
    return MemoryLog(partitions=count, name=netloc or "memory")


register_scheme(LogScheme("file", "file:///dir", _open_file))
register_scheme(LogScheme("kafka", "kafka://host:port/topic", _open_kafka))
register_scheme(LogScheme("memory", "memory://name", _open_memory))
