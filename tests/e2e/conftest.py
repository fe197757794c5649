"""The real logs the end-to-end tests run on: an embedded FileLog, and Kafka (``kafka`` mark)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from log import EventLog, open_log

LogFactory = Callable[..., Awaitable[EventLog]]

BACKENDS = [
    pytest.param("file", id="file"),
    pytest.param("kafka", id="kafka", marks=pytest.mark.kafka),
]


@pytest.fixture(params=BACKENDS)
def open_event_log(request: pytest.FixtureRequest, tmp_path: Path) -> LogFactory:
    """Opens a fresh real log: an embedded FileLog, or a new topic on the real Kafka broker.

    Keyword options go to Kafka only (e.g. ``partitions=3``); a FileLog has one partition."""
    if request.param == "kafka":
        factory: LogFactory = request.getfixturevalue("kafka_log_factory")
        return factory

    async def open_file_log(**kafka_only: Any) -> EventLog:
        return await open_log(f"file://{tmp_path / 'log'}")

    return open_file_log


@pytest.fixture
async def event_log(open_event_log: LogFactory) -> AsyncIterator[EventLog]:
    """One fresh real log, closed after the test."""
    log = await open_event_log()
    async with log:
        yield log


@pytest.fixture
async def partitioned_log(open_event_log: LogFactory) -> AsyncIterator[EventLog]:
    """A fresh real log with several partitions where the backend has them (Kafka: 3)."""
    log = await open_event_log(partitions=3)
    async with log:
        yield log
