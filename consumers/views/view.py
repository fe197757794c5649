"""The ``View`` protocol: plain state that a follower feeds with batches and snapshots."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from cache.events import EventBatch, WireBatch
from cache.events.replica_store import ChurnCounts


@runtime_checkable
class View(Protocol):
    """State built from batches. ``name`` keys the view's part of a snapshot."""

    @property
    def name(self) -> str:
        """A name unique among one follower's views."""
        ...

    def apply(self, batch: EventBatch) -> None:
        """Apply one in-order batch; raise ``ReplicaConsistencyError`` when it does not fit."""
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


class LaneRole(enum.Enum):
    """How a view takes part in the follower's replay fast lane, which applies a run of records
    natively to one ``ReplicaSet``'s store without a batch object per record. A view says its
    role in a ``lane_role`` class attribute; a view without one (or with None) keeps the
    follower on its record-by-record path. A subclass that applies batches its own way sets
    ``lane_role = None``."""

    REPLICAS = "replicas"
    """The ``ReplicaSet`` whose native store the lane applies records to."""
    READS = "reads"
    """Applies nothing of its own: it reads another view's state (``PrefixIndex``)."""
    COUNTS = "counts"
    """Counts what the lane applied, per source, through ``count_lane`` (``Stats``)."""


@runtime_checkable
class LaneCounter(Protocol):
    """A view of role ``LaneRole.COUNTS``."""

    def count_lane(self, churn: Sequence[tuple[str, ChurnCounts]]) -> None:
        """Add what a run of the lane applied: ``(source, churn)`` items, a source possibly
        more than once (``cache.events.replica_store.ChurnCounts``); the same counts
        ``apply_wire`` would have made for those records one by one."""
        ...


def lane_role(view: object) -> LaneRole | None:
    """The lane role ``view`` declares (None: it needs the record-by-record path)."""
    role = getattr(view, "lane_role", None)
    return role if isinstance(role, LaneRole) else None
