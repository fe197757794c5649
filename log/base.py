"""The ``EventLog`` interface every backend implements.

A log moves opaque payloads with string keys and hands back positions. It knows nothing of what
the payloads mean. Every log is an async context manager that owns its background tasks.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import aclosing
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from log.identity import LogIdentity
from log.position import Position, Record, StartAt


@runtime_checkable
class EventLog(Protocol):
    """An ordered, durable log of keyed records."""

    @property
    def url(self) -> str:
        """Where this log lives, as a URL ``open_log`` accepts (secrets left out)."""
        ...

    async def append(self, key: str, payload: bytes) -> Position:
        """Append one record; return its own position once durable under the log's policy."""
        ...

    async def append_batch(self, records: Sequence[tuple[str, bytes]]) -> list[Position]:
        """Append records in order; return each one's position once all are durable."""
        ...

    def read(self, start: StartAt = "beginning", *, follow: bool = False) -> AsyncIterator[Record]:
        """Iterate records from ``start`` (inclusive). Without ``follow``, stop at the end taken
        when the read began; with it, wait for new records until cancelled or closed."""
        ...

    async def end(self) -> Position:
        """Where the next record of each partition will land."""
        ...

    async def pin(self, name: str, position: Position | None) -> None:
        """Keep every record at or after ``position`` from retention under ``name`` (None unpins).

        Backends whose retention is not theirs to decide (Kafka's is the broker's) accept and
        ignore pins."""
        ...

    async def close(self) -> None:
        """Flush, stop background tasks and release resources; later calls raise
        ``LogClosedError``."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


@runtime_checkable
class KnowsItsBeginning(Protocol):
    """A log that can say where each partition starts now (after retention): a capability a
    backend may add to ``EventLog`` (``KafkaLog`` has it)."""

    async def beginning(self) -> Position:
        """The first offset each partition still holds."""
        ...


@runtime_checkable
class KnowsItsIdentity(Protocol):
    """A log that can say which log it is, and which incarnation (``log.identity``): a
    capability every backend of this package adds to ``EventLog``. ``identity_of`` asks any
    log."""

    async def identity(self) -> LogIdentity | None:
        """This log's identity; None when it has none yet (a ``FileLog`` directory no writer
        has opened since identities were introduced) or cannot tell (a broker too old to say
        its topic's id)."""
        ...


async def identity_of(log: object) -> LogIdentity | None:
    """``log``'s identity, or None when it has none or cannot say (``KnowsItsIdentity``)."""
    return await log.identity() if isinstance(log, KnowsItsIdentity) else None


@runtime_checkable
class BatchReader(Protocol):
    """A log that can also hand over records a poll at a time (a reader that handles many
    records in one call uses it; ``read`` yields the same records one by one)."""

    def read_batches(
        self, start: StartAt = "beginning", *, follow: bool = False
    ) -> AsyncIterator[list[Record]]:
        """``read``, as the non-empty lists of records each poll of the log returned; each
        list's records are of one partition, in offset order."""
        ...


async def records_of(polls: AsyncGenerator[list[Record], None]) -> AsyncGenerator[Record, None]:
    """The records of ``polls`` (a ``read_batches``) one by one, as ``read`` yields them; closes
    ``polls`` however the iteration ends, so an early break releases the log's cursor."""
    async with aclosing(polls):
        async for records in polls:
            for record in records:
                yield record
