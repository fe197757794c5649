"""An in-memory log for tests and examples: same contract as the real ones, nothing durable."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence

import anyio

from log.base import records_of
from log.closing import ClosesOnExit
from log.errors import ConfigError, LogClosedError
from log.identity import LogIdentity, new_log_identity
from log.position import Position, Record, StartAt, new_record

_READ_BATCH_RECORDS = 1024


class MemoryLog(ClosesOnExit):
    """A log held in lists, one per partition; a key always maps to the same partition."""

    def __init__(self, *, partitions: int = 1, name: str = "memory") -> None:
        if type(partitions) is not int or partitions < 1:
            raise ConfigError("partitions", f"must be a positive int, got {partitions!r}")
        self._partitions: list[list[Record]] = [[] for _ in range(partitions)]
        self._name = name
        self._closed = False
        self._appended = anyio.Event()
        self._partition_of_key: dict[str, int] = {}
        self._identity = new_log_identity()

    @property
    def url(self) -> str:
        """``memory://<name>``."""
        return f"memory://{self._name}"

    async def identity(self) -> LogIdentity:
        """A random identity drawn when this log was made (another ``MemoryLog`` has another)."""
        self._check_open()
        return self._identity

    def partition_for(self, key: str) -> int:
        """The partition that records with ``key`` go to (stable within a process)."""
        partition = self._partition_of_key.get(key)
        if partition is None:
            partition = self._partition_of_key[key] = sum(key.encode()) % len(self._partitions)
        return partition

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"{self.url} is closed")

    def _append_now(self, key: str, payload: bytes) -> Position:
        if type(payload) is not bytes:
            raise TypeError(f"payload must be bytes, got {type(payload).__name__}")
        partition = self.partition_for(key)
        records = self._partitions[partition]
        offset = len(records)
        records.append(new_record(partition, offset, key, payload, time.time()))
        return Position(((partition, offset),))

    def _wake_readers(self) -> None:
        self._appended.set()
        self._appended = anyio.Event()

    async def append(self, key: str, payload: bytes) -> Position:
        """Append one record."""
        self._check_open()
        position = self._append_now(key, payload)
        self._wake_readers()
        return position

    async def append_batch(self, records: Sequence[tuple[str, bytes]]) -> list[Position]:
        """Append records in order."""
        self._check_open()
        positions = [self._append_now(key, payload) for key, payload in records]
        self._wake_readers()
        return positions

    async def end(self) -> Position:
        """The next offset of every partition."""
        self._check_open()
        return Position.of({p: len(r) for p, r in enumerate(self._partitions)})

    def _start_offsets(self, start: StartAt) -> list[int]:
        if start == "beginning":
            return [0] * len(self._partitions)
        if start == "end":
            return [len(r) for r in self._partitions]
        if isinstance(start, Position):
            return [start.get(p) for p in range(len(self._partitions))]
        raise ConfigError("start", f"expected 'beginning', 'end' or a Position, got {start!r}")

    def read(self, start: StartAt = "beginning", *, follow: bool = False) -> AsyncIterator[Record]:
        """Iterate records in append order across partitions."""
        return records_of(self.read_batches(start, follow=follow))

    async def read_batches(
        self, start: StartAt = "beginning", *, follow: bool = False
    ) -> AsyncGenerator[list[Record], None]:
        """``read``, as lists: each partition's records available at once (at most
        ``_READ_BATCH_RECORDS`` a list)."""
        self._check_open()
        next_offsets = self._start_offsets(start)
        stop_at = [len(r) for r in self._partitions]
        while True:
            progressed = False
            for partition, records in enumerate(self._partitions):
                limit = len(records) if follow else stop_at[partition]
                while next_offsets[partition] < limit:
                    first = next_offsets[partition]
                    last = min(limit, first + _READ_BATCH_RECORDS)
                    next_offsets[partition] = last
                    progressed = True
                    yield records[first:last]
            if not follow:
                return
            if not progressed:
                await self._appended.wait()
                self._check_open()

    async def pin(self, name: str, position: Position | None) -> None:
        """Nothing is ever deleted from a memory log; pins are accepted and ignored."""
        self._check_open()

    async def close(self) -> None:
        """Close the log; waiting readers wake and fail with ``LogClosedError``."""
        self._closed = True
        self._wake_readers()
