"""Fixtures of the consumer tests: a real log to write crafted streams through."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from log import EventLog, open_log


def _file_log_available() -> bool:
    try:
        from log.file import FileLog  # noqa: F401  # only probing that the backend exists
    except ImportError:
        return False
    return True


LOG_KINDS = [
    pytest.param("memory", id="memory"),
    pytest.param(
        "file",
        id="file",
        marks=pytest.mark.skipif(not _file_log_available(), reason="log.file not built yet"),
    ),
]


@pytest.fixture(params=LOG_KINDS)
async def event_log(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventLog]:
    """An open log of each kind the consumers read: in memory, and the embedded file log."""
    url = "memory://consumers" if request.param == "memory" else (tmp_path / "log").as_uri()
    log = await open_log(url)
    async with log:
        yield log
