"""Per-source ``(epoch, seq)`` cursors: which batches a follower applies, skips or distrusts.

For each source the follower remembers the current epoch, the last seq seen in it, the epochs
it has superseded, and whether the source is diverged (and why):

- same epoch, ``seq <= cursor``: a duplicate, skipped;
- same epoch, ``seq == cursor + 1``: applied (skipped while the source is diverged);
- same epoch, ``seq > cursor + 1``: a gap, the source becomes diverged;
- an epoch superseded earlier: stale, skipped;
- any other epoch: a new epoch. Its batch must have seq 0 and begin with ``AllBlocksCleared``;
  then it is applied and heals a divergence, otherwise the source is diverged.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from cache.events import AllBlocksCleared, EventBatch, WireBatch


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
    """Where one source stands."""

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
    """Every source's cursor; ``admit`` decides a batch's fate and moves the cursor."""

    def __init__(self) -> None:
        self._by_source: dict[str, SourceCursor] = {}

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
        if _starts_epoch(batch):
            return _APPLY
        fresh.diverged = (
            f"epoch {batch.epoch} begins at seq {batch.seq} without AllBlocksCleared at seq 0"
        )
        return Admission(Verdict.BAD_EPOCH_START, fresh.diverged)

    def advance(self, seqs: Iterable[tuple[str, int]]) -> None:
        """Move known sources' cursors to the given seqs in their epochs (the follower's fast
        lane applied those batches, each the next seq of a trusted source)."""
        by_source = self._by_source
        for source, seq in seqs:
            by_source[source].seq = seq

    def mark_diverged(self, source: str, reason: str) -> None:
        """Distrust ``source`` until its next epoch (the first reason is kept)."""
        cursor = self._by_source[source]
        if cursor.diverged is None:
            cursor.diverged = reason

    def to_obj(self) -> dict[str, Any]:
        """A JSON-ready form, for snapshots."""
        return {
            source: {
                "epoch": c.epoch,
                "seq": c.seq,
                "diverged": c.diverged,
                "retired": sorted(c.retired),
            }
            for source, c in self._by_source.items()
        }

    @classmethod
    def from_obj(cls, raw: object) -> Cursors:
        """Parse what ``to_obj`` gave; ``ValueError`` naming the bad part otherwise."""
        if type(raw) is not dict:
            raise ValueError("cursors must be an object")
        cursors = cls()
        for source, item in raw.items():
            if type(item) is not dict or item.keys() != {"epoch", "seq", "diverged", "retired"}:
                raise ValueError(f"cursor of {source!r} has the wrong fields")
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
        return cursors
