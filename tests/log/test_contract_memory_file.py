"""The backend contract run against the in-memory log and the file log (every fsync policy)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from log import EventLog, MemoryLog, open_log
from tests.log.contract import LogContract, LogFactory


class TestMemoryLogContract(LogContract):
    """MemoryLog, one partition."""

    durable = False

    @pytest.fixture
    def log_factory(self) -> LogFactory:
        """A fresh in-memory log per call."""

        async def factory() -> EventLog:
            return MemoryLog()

        return factory


class TestMemoryLogThreePartitionsContract(LogContract):
    """MemoryLog with three partitions (keys spread over them)."""

    durable = False

    @pytest.fixture
    def log_factory(self) -> LogFactory:
        """A fresh three-partition in-memory log per call."""

        async def factory() -> EventLog:
            return MemoryLog(partitions=3)

        return factory


@pytest.mark.parametrize("fsync", ["always", "batch", "never"])
class TestFileLogContract(LogContract):
    """FileLog under each fsync policy, with small segments so reads cross segment files."""

    @pytest.fixture
    def log_factory(self, tmp_path: Path, fsync: str) -> LogFactory:
        """A fresh log directory per call."""
        counter = itertools.count()

        async def factory() -> EventLog:
            directory = tmp_path / f"log-{next(counter)}"
            return await open_log(f"file://{directory}?fsync={fsync}&segment_bytes=4096")

        return factory
