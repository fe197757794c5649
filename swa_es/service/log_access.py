"""Opening a log from a command: bounded in time, read-only where a command only reads."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

import anyio

from log import EventLog, LogUnavailableError, open_log


async def open_log_within(url: str, timeout_s: float, **options: Any) -> EventLog:
    """``open_log(url, **options)``, failing with ``LogUnavailableError`` after ``timeout_s``."""
    try:
        with anyio.fail_after(timeout_s):
            return await open_log(url, **options)
    except TimeoutError:
        raise LogUnavailableError(
            f"could not open {redact(url)} within {timeout_s:g} s (is the broker up?)"
        ) from None


async def open_reader(url: str, timeout_s: float, *, create: bool = False) -> EventLog:
    """Open ``url`` for reading only (a FileLog without taking the writer's lock).

    ``create`` makes a FileLog's directory first, so a follower may start before its writer.
    """
    parts = urlsplit(url)
    if parts.scheme != "file":
        return await open_log_within(url, timeout_s)
    if create:
        await anyio.Path(unquote(parts.path)).mkdir(parents=True, exist_ok=True)
    return await open_log_within(url, timeout_s, readonly=True)


def redact(url: str) -> str:
    """``url`` without its query string (which may carry credentials)."""
    return url.split("?", 1)[0]
