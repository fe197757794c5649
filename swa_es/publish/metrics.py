"""Counters of one publisher: what it published, what it discarded and why."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PublisherMetrics:
    """A point-in-time copy of a publisher's counters (``pub.metrics``).

    ``batches_queued`` counts every batch ``step()`` built (epoch openings included);
    ``batches_published`` / ``events_published`` / ``bytes_published`` count what the log
    acknowledged as durable. Every overflow is counted: ``overflows`` (full queue met),
    ``discarded_batches`` / ``discarded_events`` (dropped by a resync and superseded by the new
    epoch), ``resyncs`` (epochs opened by an overflow), ``backpressure`` (``Backpressure``
    raised). ``queue_depth`` is the number of batches not yet handed to the log.
    """

    source: str
    epoch: str
    epochs_started: int
    batches_queued: int
    batches_published: int
    events_published: int
    bytes_published: int
    appends: int
    overflows: int
    discarded_batches: int
    discarded_events: int
    resyncs: int
    backpressure: int
    append_errors: int
    append_retries: int
    queue_depth: int
    max_queue_batches: int
    failed: bool


@dataclass(slots=True)
class PublisherCounters:
    """The live, mutable counters a publisher updates (one instance per publisher)."""

    epochs_started: int = 0
    batches_queued: int = 0
    batches_published: int = 0
    events_published: int = 0
    bytes_published: int = 0
    appends: int = 0
    overflows: int = 0
    discarded_batches: int = 0
    discarded_events: int = 0
    resyncs: int = 0
    backpressure: int = 0
    append_errors: int = 0
    append_retries: int = 0
