"""Where a publisher's batches come from: a cache's native recorder, or its event list.

A feed turns one scheduler step into batches queued for the log.

* ``RecorderFeed`` serves a cache with a native ``EventRecorder`` (``SWARadixCache`` with events
  on). A step only *cuts* the ops the tree recorded: the cut knows at once how many events it
  holds and how they split into batches, so the step is numbered and queued without hashing
  anything. The hashing, the digest and the v2 encoding run later, in order, on the recorder's
  encoder thread, a native thread that never takes the GIL (so the serving loop never hands it
  over); it signals a socket the event loop waits on when records are ready. No Python event
  object is built on the way. An epoch's opening (the start, or a resync) is written from the
  recorder's node table. The encoder lingers up to a millisecond after a round's first step
  for more; a step that follows a pause (``HURRY_AFTER_PAUSE_S``) asks it to write at once
  (``hurry``), since few other steps would join its round and waiting would only delay it.
* ``EventListFeed`` serves any other ``PublishedCache``: it takes the step's events as Python
  objects and encodes them on the spot.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from cache.events import Event, EventBatch, encode_batch
from cache.events.recorder import EventRecorder, RecordEncoder
from swa_es.publish.batching import BatchBuilder, PublishedCache
from swa_es.publish.signal import WakeSignal

HURRY_AFTER_PAUSE_S = 0.001
"""A step at least this long after the previous one is written at once (``hurry``) rather than
after the encoder's linger (the same 1 ms, ``LINGER`` in ``native/src/recorder/worker.rs``).
Steps that far apart get a round each anyway (an engine steps every few milliseconds), so the
linger would only delay them and hurrying costs no extra round; steps closer together (a
serving loop stepping every 100 µs) still share rounds and wake the loop less."""


@dataclass(slots=True, eq=False)
class QueuedBatch:
    """One batch on its way to the log: ``payload`` is None until the worker has written it;
    ``ticket`` is set by the publisher when it queues the batch. ``liveness``: an offline
    marker queued in order with the batches (``cache.events.liveness``), not a batch."""

    events: int
    payload: bytes | None
    ticket: int = 0
    liveness: bool = False


@runtime_checkable
class RecordingCache(Protocol):
    """A cache whose changes a native recorder keeps (``SWARadixCache``)."""

    @property
    def event_recorder(self) -> EventRecorder | None:
        """The recorder, or None when the cache records no events."""
        ...


class Feed(Protocol):
    """What a publisher needs from its source of batches."""

    @property
    def upstream(self) -> bool:
        """Whether the events come from elsewhere (and can be lost there: gaps, unknown
        starts), rather than from the cache itself."""
        ...

    def start(self) -> None:
        """Start what runs beside the serving loop (the publisher is starting)."""

    @property
    def last_seq(self) -> int:
        """The seq of the last batch handed out in the current epoch (liveness records name
        it)."""
        ...

    def pending(self) -> bool:
        """Whether the next ``step()`` has events to publish."""
        ...

    def step(self) -> list[QueuedBatch]:
        """The step's batches, none when nothing is pending (their payloads may come later:
        see ``wait_written``)."""
        ...

    def reopen(self) -> list[QueuedBatch]:
        """Drop what was taken or cut and not yet written; the batches opening a new epoch."""
        ...

    def reopen_unknown(self) -> list[QueuedBatch]:
        """Drop the cache's pending events; an empty batch opening an epoch of unknown state."""
        ...

    def gap(self) -> list[QueuedBatch]:
        """Drop the cache's pending events; an empty batch one seq past the next."""
        ...

    def writing(self) -> bool:
        """Whether batches handed out by ``step()`` still wait for their payloads."""
        ...

    def hurry(self) -> None:
        """Someone waits for those payloads: write them without delay."""

    async def wait_written(self) -> None:
        """Return once some of those payloads are written (``collect`` fills them in)."""

    def collect(self) -> None:
        """Fill in every payload written so far."""

    def close(self) -> None:
        """Stop what runs beside the serving loop (the publisher has stopped)."""


class RecorderFeed:
    """Steps cut from a native ``EventRecorder``; records written by its encoder thread."""

    def __init__(
        self,
        recorder: EventRecorder,
        builder: BatchBuilder,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._recorder = recorder
        self._builder = builder
        self._encoder: RecordEncoder | None = None
        self._signal: WakeSignal | None = None
        # Submitted jobs by id, with the batches their records fill.
        self._jobs: dict[int, list[QueuedBatch]] = {}
        self._clock = clock
        self._last_step = -math.inf
        # batches numbered in the current epoch (the encoder numbers them; this counts along)
        self._numbered = 0

    @property
    def upstream(self) -> bool:
        """No: the tree is the source of its own events."""
        return False

    @property
    def last_seq(self) -> int:
        """The seq of the last batch numbered in the current epoch."""
        return self._numbered - 1

    def reopen_unknown(self) -> list[QueuedBatch]:
        """Refused: the tree's state is always known."""
        raise ValueError("a cache with a native recorder opens every epoch from its own state")

    def gap(self) -> list[QueuedBatch]:
        """Refused: the tree loses no events upstream."""
        raise ValueError("a cache with a native recorder loses no events upstream: no gap")

    def start(self) -> None:
        """Start the encoder thread and watch its wake-up socket (in the event loop)."""
        if self._encoder is None:
            builder = self._builder
            self._encoder = self._recorder.encoder(
                builder.source,
                builder.max_events_per_batch,
                builder.max_split_bytes,
                builder.digest_every_batches,
                token_ids=builder.token_ids,
            )
        if self._signal is None:
            self._signal = WakeSignal(self._encoder.fileno())
            self._signal.watch()

    def _running(self) -> RecordEncoder:
        if self._encoder is None:
            raise RuntimeError("the recorder feed is not started")
        return self._encoder

    def pending(self) -> bool:
        """Whether the tree recorded an event since the last cut."""
        return self._recorder.pending_events > 0

    def step(self) -> list[QueuedBatch]:
        """Cut the recorded ops and number their batches now (one native call: the encoder
        keeps the step numbering of the epoch the builder opened); the encoder thread hashes
        and writes them, at once when this step follows a pause (``HURRY_AFTER_PAUSE_S``)."""
        encoder = self._running()
        cut = encoder.step(self._builder.now())
        if cut is None:
            return []
        job, counts = cut
        self._numbered += len(counts)
        batches = [QueuedBatch(count, None) for count in counts]
        self._jobs[job] = batches
        now = self._clock()
        if now - self._last_step >= HURRY_AFTER_PAUSE_S:
            encoder.hurry()
        self._last_step = now
        return batches

    def reopen(self) -> list[QueuedBatch]:
        """Discard every cut not yet written (its ops still reach the recorder's table) and
        write the new epoch's opening from the table."""
        self._jobs.clear()
        builder = self._builder
        epoch = builder.new_epoch()
        records = self._recorder.encode_opening(
            builder.source,
            epoch,
            builder.now(),
            builder.meta.to_json(),
            builder.max_events_per_batch,
            builder.max_split_bytes,
            token_ids=builder.token_ids,
        )
        builder.opened(len(records))
        self._running().begin_epoch(epoch, len(records))
        self._numbered = len(records)
        return [QueuedBatch(events, payload) for payload, events in records]

    def writing(self) -> bool:
        """Whether submitted jobs are not written yet."""
        return bool(self._jobs)

    def hurry(self) -> None:
        """Have the encoder write its waiting jobs now (it otherwise lingers up to
        a millisecond to write several steps in one round)."""
        if self._encoder is not None and self._jobs:
            self._encoder.hurry()

    def _watched(self) -> WakeSignal:
        if self._signal is None:
            raise RuntimeError("the recorder feed is not started")
        return self._signal

    async def wait_written(self) -> None:
        """Wait for the encoder's signal that jobs are finished."""
        await self._watched().wait()

    def collect(self) -> None:
        """Fill the batches of every finished job (those of discarded jobs are dropped)."""
        encoder = self._running()
        # Forget the signal before taking the jobs: a job finished in between signals again.
        self._watched().consume()
        for job, records in encoder.take_done():
            batches = self._jobs.pop(job, None)
            if batches is None:
                continue  # discarded by a resync
            if records is None or len(records) != len(batches):
                raise RuntimeError(
                    f"encoder wrote {None if records is None else len(records)} record(s) for "
                    f"a cut planned as {len(batches)} batch(es)"
                )
            for batch, (payload, events) in zip(batches, records, strict=True):
                if events != batch.events:
                    raise RuntimeError(f"encoder wrote {events} events, {batch.events} planned")
                batch.payload = payload

    def close(self) -> None:
        """Stop watching the wake-up socket and the encoder thread (after its current job)."""
        if self._signal is not None:
            self._signal.close()
        if self._encoder is not None:
            self._encoder.close()


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
        """The waiting events, the cache's new ones included, as encoded batches."""
        self._carry += self._cache.take_events()
        events, self._carry = self._carry, []
        return _encoded(self._builder.step_batches(events, self._cache.state_digest))

    @property
    def upstream(self) -> bool:
        """Yes: the events come from ``take_events()`` (an engine's stream, for a bridge)."""
        return True

    @property
    def last_seq(self) -> int:
        """The seq of the last batch built in the current epoch."""
        return self._builder.next_seq - 1

    def reopen(self) -> list[QueuedBatch]:
        """Drop the waiting events (the snapshot covers them) and open a new epoch."""
        self._carry = []
        self._cache.take_events()
        snapshot = self._cache.snapshot_events()
        return _encoded(self._builder.open_epoch(snapshot, self._cache.state_digest()))

    def reopen_unknown(self) -> list[QueuedBatch]:
        """Drop the waiting events; an epoch of unknown state (an empty batch with meta)."""
        self._carry = []
        self._cache.take_events()
        return _encoded(self._builder.open_unknown_epoch())

    def gap(self) -> list[QueuedBatch]:
        """Drop the waiting events; an empty batch one seq past the next."""
        self._carry = []
        self._cache.take_events()
        return _encoded([self._builder.gap_batch()])

    def start(self) -> None:
        """Nothing runs beside the loop."""

    def writing(self) -> bool:
        """Never: every batch is encoded in ``step``."""
        return False

    def hurry(self) -> None:
        """Nothing is being written."""

    async def wait_written(self) -> None:
        """Never called (nothing is written later)."""
        raise RuntimeError("EventListFeed encodes on the spot; nothing is written later")

    def collect(self) -> None:
        """Nothing to collect."""

    def close(self) -> None:
        """Nothing to stop."""


def _encoded(batches: list[EventBatch]) -> list[QueuedBatch]:
    return [QueuedBatch(len(batch.events), encode_batch(batch)) for batch in batches]


def feed_for(cache: PublishedCache, builder: BatchBuilder) -> Feed:
    """The native feed when ``cache`` has a recorder, else the event-list feed."""
    if isinstance(cache, RecordingCache):
        recorder = cache.event_recorder
        if recorder is not None:
            return RecorderFeed(recorder, builder)
    return EventListFeed(cache, builder)
