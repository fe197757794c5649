"""The counters of one publisher, as one live dataclass (``pub.metrics``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(slots=True)
class PublisherMetrics:
    """What a publisher published, what it discarded and why; the publisher updates this one
    object as it works (read it any time; ``as_dict()`` or ``dataclasses.replace`` for a copy).

    ``epoch`` is the epoch being published. ``batches_queued`` counts every batch ``step()``
    built (epoch openings included); ``batches_published`` / ``events_published`` /
    ``bytes_published`` count what the log acknowledged as durable, in ``appends`` calls. Every
    overflow is counted: ``overflows`` (full queue met), ``discarded_batches`` /
    ``discarded_events`` (dropped by a resync and superseded by the new epoch), ``resyncs``
    (epochs opened by an overflow), ``backpressure`` (``Backpressure`` raised).
    ``queue_depth`` is the number of batches not yet handed to the log, out of
    ``max_queue_batches``; ``failed`` turns true when the append task died. Liveness records
    (``cache.events.liveness``) are not batches: ``heartbeats`` and ``offline_markers`` count
    those appended, ``liveness_errors`` the heartbeats the log refused (logged, not fatal).
    """

    source: str
    max_queue_batches: int
    epoch: str = ""
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
    queue_depth: int = 0
    heartbeats: int = 0
    offline_markers: int = 0
    liveness_errors: int = 0
    failed: bool = False

    def as_dict(self) -> dict[str, str | int | bool]:
        """Every field, for a status document."""
        return asdict(self)
