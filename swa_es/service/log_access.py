"""Opening what a command reads: a log (read-only where a command only reads) or a snapshot
store, each bounded in time."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

import anyio

from consumers import SnapshotStorage, open_snapshot_store
from log import EventLog, LogUnavailableError, open_log
from log.directories import create_data_directory


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
        await anyio.to_thread.run_sync(create_data_directory, unquote(parts.path))
    return await open_log_within(url, timeout_s, readonly=True)


async def open_snapshots(url: str, timeout_s: float, *, keep: int = 3) -> SnapshotStorage:
    """The snapshot store ``url`` names, opened within ``timeout_s`` (a Kafka topic is created
    unless it exists). Close it when done."""
    try:
        with anyio.fail_after(timeout_s):
            return await open_snapshot_store(url, keep=keep)
    except TimeoutError:
        raise LogUnavailableError(
            f"could not open the snapshot store {redact(url)} within {timeout_s:g} s "
            "(is the broker up?)"
        ) from None


def redact(url: str) -> str:
    """``url`` without its query string (which may carry credentials)."""
    return url.split("?", 1)[0]
