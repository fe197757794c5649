"""The real logs the end-to-end tests run on: an embedded FileLog, and Kafka (``kafka`` mark)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from log import EventLog, open_log

LogFactory = Callable[[], Awaitable[EventLog]]

BACKENDS = [
    pytest.param("file", id="file"),
    pytest.param("kafka", id="kafka", marks=pytest.mark.kafka),
]


@pytest.fixture(params=BACKENDS)
async def event_log(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventLog]:
    """A fresh real log: an embedded FileLog, or a new topic on the real Kafka broker."""
    if request.param == "file":
        log = await open_log(f"file://{tmp_path / 'log'}")
    else:
        factory: LogFactory = request.getfixturevalue("kafka_log_factory")
        log = await factory()
    async with log:
        yield log
