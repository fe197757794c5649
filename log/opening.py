"""``open_log(url, **options)``: pick the backend from the URL scheme and open it."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlsplit

from log.base import EventLog
from log.errors import ConfigError
from log.memory import MemoryLog


def split_options(url: str, options: dict[str, Any]) -> tuple[str, str, str, dict[str, Any]]:
    """(scheme, netloc, path, options) of ``url``; keyword options override query parameters."""
    parts = urlsplit(url)
    if not parts.scheme:
        raise ConfigError("url", f"{url!r} has no scheme (expected file:// or kafka://)")
    query: dict[str, Any] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True, strict_parsing=False):
        if name in query:
            raise ConfigError(name, f"given twice in {url!r}")
        query[name] = value
    query.update(options)
    return parts.scheme, parts.netloc, parts.path, query


async def open_log(url: str, **options: Any) -> EventLog:
    """Open the log at ``url`` (``file:///dir``, ``kafka://host:port[,host:port]/topic``,
    ``memory://name``); options come as query parameters or keyword arguments."""
    scheme, netloc, path, merged = split_options(url, options)
    if scheme == "file":
        from log.file import FileLog

        return await FileLog.open_url(netloc, path, merged)
    if scheme == "kafka":
        from log.kafka import KafkaLog

        return await KafkaLog.open_url(netloc, path, merged)
    if scheme == "memory":
        partitions = merged.pop("partitions", 1)
        if merged:
            raise ConfigError(sorted(merged)[0], "unknown option for memory://")
        try:
            count = int(partitions)
        except (TypeError, ValueError):
            raise ConfigError("partitions", f"expected an int, got {partitions!r}") from None
        return MemoryLog(partitions=count, name=netloc or "memory")
    raise ConfigError("url", f"unknown scheme {scheme!r} in {url!r} (expected file or kafka)")
