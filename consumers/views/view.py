"""The ``View`` protocol: plain state that a follower feeds with batches and snapshots."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from cache.events import EventBatch, WireBatch


@runtime_checkable
class View(Protocol):
    """State built from batches. ``name`` keys the view's part of a snapshot."""

    @property
    def name(self) -> str:
        """A name unique among one follower's views."""
        ...

    def apply(self, batch: EventBatch) -> None:
        """Apply one in-order batch; raise ``ViewConsistencyError`` when it does not fit."""
        ...

    def mark_diverged(self, source: str, reason: str) -> None:
        """From now on answer "unknown" for ``source``; the next ``AllBlocksCleared`` of that
        source (the start of a trusted epoch) ends it."""
        ...

    def snapshot(self) -> bytes:
        """The whole state as bytes (no pickle)."""
        ...

    def load(self, data: bytes) -> None:
        """Replace the state with what ``snapshot`` wrote; raise ``ViewStateError`` on bad
        bytes."""
        ...


@runtime_checkable
class DigestView(Protocol):
    """A view that can tell the state digest of a source, to check a batch's in-band digest."""

    def source_digest(self, source: str) -> str | None:
        """The digest of ``source``'s state as this view holds it (None: source unknown)."""
        ...


@runtime_checkable
class WireView(Protocol):
    """A view that applies a decoded record as it is held natively (``WireBatch``), without a
    Python object per event. The follower gives such a view the ``WireBatch`` and every other
    view the ``EventBatch`` (its events made once, only when some view needs them)."""

    def apply_wire(self, batch: WireBatch) -> None:
        """``apply`` for a ``WireBatch``: same effect, same errors."""
        ...
