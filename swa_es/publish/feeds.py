"""Where a publisher's batches come from: a cache's native recorder, or its event list.

A feed turns one scheduler step into batches queued for the log.

* ``RecorderFeed`` serves a cache with a native ``EventRecorder`` (``SWARadixCache`` with events
  on). A step only *cuts* the ops the tree recorded: the cut knows at once how many events it
  holds and how they split into batches, so the step is numbered and queued without hashing
  anything. The hashing, the digest and the v2 encoding run later, in order, in the publisher's
  worker thread with the GIL released (``encode``); no Python event object is built on the way.
  An epoch's opening (the start, or a resync) is written from the recorder's node table.
* ``EventListFeed`` serves any other ``PublishedCache``: it takes the step's events as Python
  objects and encodes them on the spot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from cache.events import Event, encode_batch
from cache.events.recorder import EventRecorder, RecordedCut
from swa_es.publish.batching import BatchBuilder, PublishedCache


@dataclass(slots=True, eq=False)
class QueuedBatch:
    """One batch on its way to the log: ``payload`` is None until the worker has written it;
    ``ticket`` is set by the publisher when it queues the batch."""

    events: int
    payload: bytes | None
    ticket: int = 0


@dataclass(slots=True, eq=False)
class EncodeJob:
    """A cut step waiting for the worker: its numbering and the batches it will fill."""

    cut: RecordedCut
    epoch: str
    first_seq: int
    ts: float
    with_digest: bool
    batches: list[QueuedBatch]
    discarded: bool = field(default=False)


@runtime_checkable
class RecordingCache(Protocol):
    """A cache whose changes a native recorder keeps (``SWARadixCache``)."""

    @property
    def event_recorder(self) -> EventRecorder | None:
        """The recorder, or None when the cache records no events."""
        ...


class Feed(Protocol):
    """What a publisher needs from its source of batches."""

    def pending(self) -> bool:
        """Whether the next ``step()`` has events to publish."""
        ...

    def step(self) -> list[QueuedBatch]:
        """The step's batches (payloads may come later, from ``encode``)."""
        ...

    def reopen(self) -> list[QueuedBatch]:
        """Drop what was taken or cut and not yet written; the batches opening a new epoch."""
        ...

    def take_jobs(self) -> list[EncodeJob]:
        """The cut steps waiting for the worker, oldest first (none for a feed that encodes
        on the spot)."""
        ...

    def encode(self, jobs: Sequence[EncodeJob]) -> list[list[tuple[bytes, int]] | None]:
        """Write ``jobs``' records (called in a worker thread)."""
        ...

    def finish(
        self, jobs: Sequence[EncodeJob], results: Sequence[list[tuple[bytes, int]] | None]
    ) -> None:
        """Fill the jobs' batches with what ``encode`` wrote (event-loop thread)."""
        ...


class RecorderFeed:
    """Steps cut from a native ``EventRecorder``; records written by the worker thread."""

    def __init__(self, recorder: EventRecorder, builder: BatchBuilder) -> None:
        self._recorder = recorder
        self._builder = builder
        self._waiting: list[EncodeJob] = []
        self._open: list[EncodeJob] = []

    def pending(self) -> bool:
        """Whether the tree recorded an event since the last cut."""
        return self._recorder.pending_events > 0

    def step(self) -> list[QueuedBatch]:
        """Cut the recorded ops; number their batches now, leave the payloads to the worker."""
        builder = self._builder
        cut = self._recorder.cut(builder.max_events_per_batch, builder.max_split_bytes)
        if cut is None:
            return []
        counts = cut.batch_events
        first_seq, with_digest = builder.reserve(len(counts))
        batches = [QueuedBatch(count, None) for count in counts]
        job = EncodeJob(cut, builder.epoch, first_seq, builder.now(), with_digest, batches)
        self._waiting.append(job)
        self._open.append(job)
        return batches

    def reopen(self) -> list[QueuedBatch]:
        """Discard every cut not yet written (its ops still reach the recorder's table) and
        write the new epoch's opening from the table."""
        for job in self._open:
            job.discarded = True
        self._waiting, self._open = [], []
        builder = self._builder
        epoch = builder.new_epoch()
        records = self._recorder.encode_opening(
            builder.source,
            epoch,
            builder.now(),
            builder.meta.to_json(),
            builder.max_events_per_batch,
            builder.max_split_bytes,
        )
        builder.opened(len(records))
        return [QueuedBatch(events, payload) for payload, events in records]

    def take_jobs(self) -> list[EncodeJob]:
        """The cut steps not yet handed to the worker."""
        jobs, self._waiting = self._waiting, []
        return jobs

    def encode(self, jobs: Sequence[EncodeJob]) -> list[list[tuple[bytes, int]] | None]:
        """Process and encode ``jobs`` in the core, GIL released (worker thread)."""
        return self._recorder.encode_cuts(
            self._builder.source,
            [(job.cut, job.epoch, job.first_seq, job.ts, job.with_digest) for job in jobs],
        )

    def finish(
        self, jobs: Sequence[EncodeJob], results: Sequence[list[tuple[bytes, int]] | None]
    ) -> None:
        """Fill the payloads of jobs still wanted (a resync may have discarded some)."""
        done = set(map(id, jobs))
        self._open = [job for job in self._open if id(job) not in done]
        for job, records in zip(jobs, results, strict=True):
            if job.discarded:
                continue
            if records is None or len(records) != len(job.batches):
                raise RuntimeError(
                    f"recorder wrote {None if records is None else len(records)} record(s) for "
                    f"a cut planned as {len(job.batches)} batch(es)"
                )
            for batch, (payload, events) in zip(job.batches, records, strict=True):
                if events != batch.events:
                    raise RuntimeError(f"recorder wrote {events} events, {batch.events} planned")
                batch.payload = payload


class EventListFeed:
    """Steps taken from ``cache.take_events()`` and encoded at once."""

    def __init__(self, cache: PublishedCache, builder: BatchBuilder) -> None:
        self._cache = cache
        self._builder = builder
        # Events taken from the cache and not yet published (kept over a ``Backpressure``).
        self._carry: list[Event] = []

    def pending(self) -> bool:
        """Take the cache's new events; whether any is waiting."""
        self._carry += self._cache.take_events()
        return bool(self._carry)

    def step(self) -> list[QueuedBatch]:
        """The waiting events as encoded batches."""
        events, self._carry = self._carry, []
        batches = self._builder.step_batches(events, self._cache.state_digest)
        return [QueuedBatch(len(b.events), encode_batch(b)) for b in batches]

    def reopen(self) -> list[QueuedBatch]:
        """Drop the waiting events (the snapshot covers them) and open a new epoch."""
        self._carry = []
        self._cache.take_events()
        snapshot = self._cache.snapshot_events()
        batches = self._builder.open_epoch(snapshot, self._cache.state_digest())
        return [QueuedBatch(len(b.events), encode_batch(b)) for b in batches]

    def take_jobs(self) -> list[EncodeJob]:
        """Nothing is left for a worker."""
        return []

    def encode(self, jobs: Sequence[EncodeJob]) -> list[list[tuple[bytes, int]] | None]:
        """Never called: every batch is encoded in ``step``."""
        raise RuntimeError("EventListFeed encodes on the spot; it has no jobs")

    def finish(
        self, jobs: Sequence[EncodeJob], results: Sequence[list[tuple[bytes, int]] | None]
    ) -> None:
        """Never called (no jobs)."""


def feed_for(cache: PublishedCache, builder: BatchBuilder) -> Feed:
    """The native feed when ``cache`` has a recorder, else the event-list feed."""
    if isinstance(cache, RecordingCache):
        recorder = cache.event_recorder
        if recorder is not None:
            return RecorderFeed(recorder, builder)
    return EventListFeed(cache, builder)
