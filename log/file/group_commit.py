"""Group commit: concurrent appends share one write and one fdatasync.

Appends join the open *batch*. The first append of a batch is its leader: it waits for the
previous batch to finish (appends arriving meanwhile join this batch), lingers up to
``linger_s`` unless the batch is already full or the previous commit served a single call (a
lone sequential appender gains nothing from waiting), then hands every frame of the batch to one
worker-thread call that writes (and, under ``always``/``batch``, syncs) them. Every append of
the batch returns when that call returns. The leader's work is shielded from cancellation, so
a cancelled caller never strands the others.

Once a write returns (synced under the policy) ``committed_end`` moves past its records and,
while a reader in this process is registered, they join the committed tail (``log.file.tail``),
from which such a reader takes them without reading the file back.

No background task is involved. A write the writer cut back cleanly (``RewoundWriteError``: a
full disk, say) fails only the appends whose records did not all reach the log, plus the batches
already queued behind it (their offsets were counted on the failed write); they raise a
retriable ``LogWriteError`` (``LogDiskFullError`` for a full disk) and later appends carry on
from the log's real end. Any other failure (a failed fdatasync, a writer that could not cut
back) stops the committer: every append of that batch and of the batches queued behind it
raises a non-retriable ``LogWriteError``, and so does every later append, until the log is
reopened (recovery then decides what is on disk).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import anyio
import anyio.lowlevel
import anyio.to_thread

from log.errors import LogWriteError
from log.file.framing import encode_frame
from log.file.tail import CommittedTail
from log.file.writer import RewoundWriteError
from log.position import Record


@dataclass(frozen=True, slots=True)
class CommitLimits:
    """When a batch stops taking appends: a count of records, of append calls, and a linger."""

    max_records: int
    max_calls: int
    linger_s: float


@dataclass(slots=True, eq=False)
class _Batch:
    first_offset: int
    prev: _Batch | None
    generation: int
    frames: list[bytes] = field(default_factory=list)
    # The batch's records for the committed tail; None once a call joined without them.
    tail_records: list[Record] | None = field(default_factory=list)
    records: int = 0
    calls: int = 0
    sealed: bool = False
    full: anyio.Event = field(default_factory=anyio.Event)
    written: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)
    error: BaseException | None = None
    rewound: RewoundWriteError | None = None
    kept_end: int = 0


_new_tuple = tuple.__new__

WriteFrames = Callable[[list[bytes], int], None]
"""Blocking: write these frames (the first has this offset) and make them durable."""


class GroupCommitter:
    """Assigns offsets, frames records and commits them in shared batches."""

    def __init__(self, next_offset: int, write: WriteFrames, limits: CommitLimits) -> None:
        self.next_offset = next_offset
        self.committed_end = next_offset
        self.commits = 0
        self._write = write
        self._limits = limits
        self._open: _Batch | None = None
        self._last: _Batch | None = None
        self._failure: BaseException | None = None
        self._committed = anyio.Event()
        self._others_were_waiting = False
        self._generation = 0
        self._last_rewind: RewoundWriteError | None = None
        self.tail = CommittedTail(next_offset)
        """The latest committed records, for readers in this process."""

    @property
    def failure(self) -> BaseException | None:
        """The write error that stopped this committer, if any."""
        return self._failure

    async def wait_committed(self) -> None:
        """Return after the next commit (or ``wake``)."""
        await self._committed.wait()

    def wake(self) -> None:
        """Wake everyone waiting in ``wait_committed``."""
        self._committed.set()
        self._committed = anyio.Event()

    async def append(self, records: Sequence[tuple[bytes, bytes]]) -> int:
        """Append (key, payload) records; return the first one's offset once durable."""
        self._raise_if_failed()
        first = self.next_offset
        timestamp = time.time()
        frames = [
            encode_frame(first + i, timestamp, key, payload)
            for i, (key, payload) in enumerate(records)
        ]
        self.next_offset += len(frames)
        batch, leader = self._join(frames, first)
        if batch.tail_records is not None:
            if self.tail.readers:
                batch.tail_records += [
                    _new_tuple(Record, (0, first + i, key.decode(), payload, timestamp))
                    for i, (key, payload) in enumerate(records)
                ]
            else:
                batch.tail_records = None
        if leader:
            with anyio.CancelScope(shield=True):
                await self._lead(batch)
        else:
            await batch.done.wait()
        if batch.rewound is not None:
            if first + len(frames) <= batch.kept_end:
                return first  # every record of this call reached the log before the failure
            raise batch.rewound.for_call(first, len(frames), batch.kept_end) from batch.rewound
        if batch.error is not None:
            raise LogWriteError(
                f"append failed, reopen the log to recover: {batch.error}", retriable=False
            ) from batch.error
        return first

    async def drain(self) -> None:
        """Wait until every batch handed in so far has been written (or failed)."""
        while self._last is not None and not self._last.done.is_set():
            await self._last.done.wait()

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise LogWriteError(
                f"an earlier append failed, reopen the log to recover: {self._failure}",
                retriable=False,
            ) from self._failure

    def _rewind_to(self, end: int, error: RewoundWriteError) -> None:
        """The log now ends at ``end``: later appends start there; batches queued meanwhile
        (an older generation) fail without writing."""
        self.committed_end = self.next_offset = end
        self.tail.reset(end)
        self._generation += 1
        self._last_rewind = error
        if self._open is not None:
            self._seal(self._open)
        self.wake()

    def _join(self, frames: list[bytes], first: int) -> tuple[_Batch, bool]:
        batch = self._open
        leader = batch is None or batch.sealed
        if batch is None or batch.sealed:
            batch = _Batch(first_offset=first, prev=self._last, generation=self._generation)
            self._open = self._last = batch
        batch.frames.extend(frames)
        batch.records += len(frames)
        batch.calls += 1
        if batch.records >= self._limits.max_records or batch.calls >= self._limits.max_calls:
            self._seal(batch)
        return batch, leader

    def _seal(self, batch: _Batch) -> None:
        batch.sealed = True
        batch.full.set()
        if self._open is batch:
            self._open = None

    async def _lead(self, batch: _Batch) -> None:
        if batch.prev is not None:
            await batch.prev.written.wait()
            batch.prev = None
        if not batch.sealed and self._limits.linger_s > 0 and self._others_were_waiting:
            with anyio.move_on_after(self._limits.linger_s):
                await batch.full.wait()
        self._seal(batch)
        try:
            self._raise_if_failed()
            if batch.generation != self._generation:
                # A write before this batch was cut back: the offsets counted for this batch
                # are not where its records would land. Nothing of it is written.
                assert self._last_rewind is not None
                batch.rewound, batch.kept_end = self._last_rewind, batch.first_offset
            else:
                await anyio.to_thread.run_sync(self._write, batch.frames, batch.first_offset)
                self.committed_end = batch.first_offset + batch.records
                if batch.tail_records is not None:
                    self.tail.add(batch.tail_records)
                else:
                    self.tail.reset(self.committed_end)
                self.commits += 1
                self._others_were_waiting = batch.calls > 1
                self.wake()
        except RewoundWriteError as exc:
            batch.rewound, batch.kept_end = exc, batch.first_offset + exc.kept_frames
            self._rewind_to(batch.kept_end, exc)
        except Exception as exc:
            batch.error = exc
            self._failure = self._failure or exc
        except BaseException as exc:
            batch.error = exc
            self._failure = self._failure or exc
            batch.written.set()
            batch.done.set()
            raise
        batch.frames = []
        batch.tail_records = None
        batch.written.set()
        if self._last is not batch:
            # Let the next batch's leader hand its write to a thread before this batch's
            # appenders wake and run: the disk then stays busy while they refill.
            await anyio.lowlevel.checkpoint()
        batch.done.set()
