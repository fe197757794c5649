"""What a full publisher queue does, and the error the ``block`` policy raises."""

from __future__ import annotations

from enum import StrEnum

from cache.errors import SwaEsError


class OverflowPolicy(StrEnum):
    """The choice a full publisher queue makes; never a silent drop.

    ``RESYNC`` discards the queued batches (counted) and starts a new epoch that carries the whole
    current tree; ``BLOCK`` makes ``step()`` raise ``Backpressure`` and leaves the cache's events
    where they are, so nothing is lost and the caller can ``await pub.wait_ready()``.
    """

    RESYNC = "resync"
    BLOCK = "block"

    @classmethod
    def parse(cls, value: OverflowPolicy | str) -> OverflowPolicy:
        """The policy named by ``value``; a clear ``ValueError`` for anything else."""
        try:
            return cls(value)
        except ValueError:
            names = ", ".join(repr(p.value) for p in cls)
            raise ValueError(f"overflow: expected one of {names}, got {value!r}") from None


class Backpressure(SwaEsError):  # noqa: N818 -- the contract name (docs/design.md §6), not an *Error
    """The publisher's queue is full under the ``block`` policy; ``await pub.wait_ready()``.

    Raised before any event is taken from the cache, so retrying ``step()`` later loses nothing.
    """

    def __init__(self, source: str, queue_depth: int, max_queue_batches: int) -> None:
        self.source = source
        self.queue_depth = queue_depth
        self.max_queue_batches = max_queue_batches
        super().__init__(
            f"publisher {source!r}: queue full ({queue_depth}/{max_queue_batches} batches); "
            "await wait_ready() before the next step()"
        )
