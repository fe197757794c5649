"""Per-source ``(epoch, seq)`` cursors: which batches a follower applies, skips or distrusts.

For each source the follower remembers the current epoch, the last seq seen in it, the epochs
it has superseded, and whether the source is diverged (and why):

- same epoch, ``seq <= cursor``: a duplicate, skipped;
- same epoch, ``seq == cursor + 1``: applied (skipped while the source is diverged);
- same epoch, ``seq > cursor + 1``: a gap, the source becomes diverged;
- an epoch superseded earlier: stale, skipped;
- any other epoch: a new epoch. Its batch must have seq 0 and begin with ``AllBlocksCleared``;
  then it is applied and heals a divergence, otherwise the source is diverged.

Liveness (``cache.events.liveness``): every batch that is not a duplicate or stale counts as
hearing from the source, stamped with the follower's own clock when it was read (never the
writer's: clock skew between machines cannot make a live source look dead). A heartbeat or an
offline marker is heard only when it names exactly the cursor's ``(epoch, seq)``; one from
another epoch or from before the cursor is stale, skipped; one past the cursor says batches
were lost, a gap. An offline marker holds until the source is heard again.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cache.events import AllBlocksCleared, EventBatch, WireBatch
from cache.events.liveness import Liveness, LivenessRecord

Clock = Callable[[], float]
"""Seconds on a monotonic clock (``time.monotonic``; tests may freeze it)."""


class Verdict(enum.Enum):
    """What to do with one batch."""

    APPLY = "apply"
    DUPLICATE = "duplicate"
    STALE = "stale"
    GAP = "gap"
    BAD_EPOCH_START = "bad_epoch_start"
    WHILE_DIVERGED = "while_diverged"


@dataclass(frozen=True, slots=True)
class Admission:
    """A verdict and, for the ones that make a source diverge, why."""

    verdict: Verdict
    reason: str = ""


@dataclass(slots=True)
class SourceCursor:
    """Where one source stands (when it was last heard, and whether it is offline by its own
    marker, the ``Cursors`` keep in maps of their own, which the routing API reads per
    request)."""

    epoch: str
    seq: int
    diverged: str | None = None
    retired: set[str] = field(default_factory=set)


_APPLY = Admission(Verdict.APPLY)
_DUPLICATE = Admission(Verdict.DUPLICATE)
_STALE = Admission(Verdict.STALE)
_WHILE_DIVERGED = Admission(Verdict.WHILE_DIVERGED)


def _starts_epoch(batch: EventBatch | WireBatch) -> bool:
    if isinstance(batch, WireBatch):  # from its header and first event, read natively
        return batch.starts_epoch
    return batch.seq == 0 and bool(batch.events) and isinstance(batch.events[0], AllBlocksCleared)


class Cursors:
    """Every source's cursor; ``admit`` decides a batch's fate and moves the cursor, ``hear``
    a liveness record's. ``clock`` stamps when each source was heard."""

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self._by_source: dict[str, SourceCursor] = {}
        self._heard: dict[str, float] = {}
        """Per source, when it was last heard (``clock``)."""
        self._offline: dict[str, str] = {}
        """The sources offline by their own marker, and why."""
        self.clock = clock

    def _heard_now(self, source: str, offline: str | None = None) -> None:
        self._heard[source] = self.clock()
        if offline is not None:
            self._offline[source] = offline
        elif self._offline:
            self._offline.pop(source, None)

    def get(self, source: str) -> SourceCursor | None:
        """The cursor of ``source`` (None when never seen)."""
        return self._by_source.get(source)

    def sources(self) -> list[str]:
        """Every source seen, sorted."""
        return sorted(self._by_source)

    def diverged(self) -> dict[str, str]:
        """Diverged sources and why."""
        return {s: c.diverged for s, c in self._by_source.items() if c.diverged is not None}

    def admit(self, batch: EventBatch | WireBatch) -> Admission:
        """Classify ``batch`` against its source's cursor and advance the cursor (header fields
        only: a ``WireBatch``'s events are never made here)."""
        cursor = self._by_source.get(batch.source)
        if cursor is None or batch.epoch != cursor.epoch:
            if cursor is not None and batch.epoch in cursor.retired:
                return _STALE
            return self._new_epoch(batch, cursor)
        seq = batch.seq
        if seq <= cursor.seq:
            return _DUPLICATE
        expected = cursor.seq + 1
        cursor.seq = seq
        self._heard_now(batch.source)
        if cursor.diverged is not None:
            return _WHILE_DIVERGED
        if seq > expected:
            reason = f"seq gap in epoch {batch.epoch}: expected {expected}, got {seq}"
            cursor.diverged = reason
            return Admission(Verdict.GAP, reason)
        return _APPLY

    def _new_epoch(self, batch: EventBatch | WireBatch, cursor: SourceCursor | None) -> Admission:
        retired = set() if cursor is None else cursor.retired | {cursor.epoch}
        fresh = SourceCursor(batch.epoch, batch.seq, retired=retired)
        self._by_source[batch.source] = fresh
        self._heard_now(batch.source)
        if _starts_epoch(batch):
            return _APPLY
        fresh.diverged = (
            f"epoch {batch.epoch} begins at seq {batch.seq} without AllBlocksCleared at seq 0"
        )
        return Admission(Verdict.BAD_EPOCH_START, fresh.diverged)

    def advance(self, seqs: Iterable[tuple[str, int]]) -> None:
        """Move known sources' cursors to the given seqs in their epochs (the follower's fast
        lane applied those batches, each the next seq of a trusted source)."""
        by_source, heard, offline = self._by_source, self._heard, self._offline
        now = self.clock()
        for source, seq in seqs:
            by_source[source].seq = seq
            heard[source] = now
            if offline:
                offline.pop(source, None)

    def hear(self, record: LivenessRecord) -> Admission:
        """Classify a liveness record against its source's cursor (see the module docstring):
        ``APPLY`` when heard (the cursor's heard time and offline state follow it), ``STALE``,
        or ``GAP`` with the reason (the cursor is then diverged and moved to the record's seq).
        """
        cursor = self._by_source.get(record.source)
        if cursor is None or record.epoch != cursor.epoch or record.seq < cursor.seq:
            return _STALE
        marker = record.reason if record.kind is Liveness.OFFLINE else None
        self._heard_now(record.source, marker)
        if record.seq == cursor.seq:
            return _APPLY
        reason = (
            f"seq gap in epoch {record.epoch}: a {record.kind.value} record follows seq "
            f"{record.seq}, but the last batch read is seq {cursor.seq}"
        )
        cursor.seq = record.seq
        if cursor.diverged is None:
            cursor.diverged = reason
        return Admission(Verdict.GAP, reason)

    def heard_at(self) -> dict[str, float]:
        """Per source, when it was last heard on ``clock`` (the cursors' own map: read it, never
        change or keep it)."""
        return self._heard

    def marked_offline(self) -> Mapping[str, str]:
        """The sources offline by their own marker, and why (a live view: read, never keep)."""
        return self._offline

    def heard_s(self, source: str, now: float | None = None) -> float | None:
        """Seconds since ``source`` was last heard (None: never seen)."""
        heard = self._heard.get(source)
        if heard is None:
            return None
        elapsed = (self.clock() if now is None else now) - heard
        return elapsed if elapsed > 0.0 else 0.0

    def mark_diverged(self, source: str, reason: str) -> None:
        """Distrust ``source`` until its next epoch (the first reason is kept)."""
        cursor = self._by_source[source]
        if cursor.diverged is None:
            cursor.diverged = reason

    def to_obj(self) -> dict[str, Any]:
        """A JSON-ready form, for snapshots."""
        offline = self._offline
        return {s: _cursor_obj(c, offline.get(s)) for s, c in self._by_source.items()}

    @classmethod
    def from_obj(cls, raw: object, clock: Clock = time.monotonic) -> Cursors:
        """Parse what ``to_obj`` gave; ``ValueError`` naming the bad part otherwise. Every
        source counts as heard now (``clock``); an offline marker read before still holds."""
        if type(raw) is not dict:
            raise ValueError("cursors must be an object")
        cursors = cls(clock)
        now = clock()
        for source, item in raw.items():
            if type(item) is not dict or item.keys() - {"offline"} != _CURSOR_FIELDS:
                raise ValueError(f"cursor of {source!r} has the wrong fields")
            offline = item.get("offline")
            if offline is not None and type(offline) is not str:
                raise ValueError(f"cursor of {source!r}: bad offline reason")
            epoch, seq, diverged, retired = (
                item["epoch"],
                item["seq"],
                item["diverged"],
                item["retired"],
            )
            if type(epoch) is not str or type(seq) is not int or seq < 0:
                raise ValueError(f"cursor of {source!r}: bad epoch or seq")
            if diverged is not None and type(diverged) is not str:
                raise ValueError(f"cursor of {source!r}: bad diverged reason")
            if type(retired) is not list or not all(type(e) is str for e in retired):
                raise ValueError(f"cursor of {source!r}: bad retired epochs")
            cursors._by_source[source] = SourceCursor(epoch, seq, diverged, set(retired))
            cursors._heard[source] = now
            if offline is not None:
                cursors._offline[source] = offline
        return cursors


_CURSOR_FIELDS = {"epoch", "seq", "diverged", "retired"}


def _cursor_obj(cursor: SourceCursor, offline: str | None) -> dict[str, Any]:
    """One cursor's JSON-ready form (``offline`` only when set: older readers know the rest)."""
    obj: dict[str, Any] = {
        "epoch": cursor.epoch,
        "seq": cursor.seq,
        "diverged": cursor.diverged,
        "retired": sorted(cursor.retired),
    }
    if offline is not None:
        obj["offline"] = offline
    return obj
