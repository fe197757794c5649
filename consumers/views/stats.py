"""The ``stats`` view: per source block and tombstone counts, and churn counters.

Churn counts blocks (one per block hash) by what happened to them; ``cleared`` counts
``AllBlocksCleared`` events. Block and tombstone counts come from replicas: shared with a
``ReplicaSet`` view (``Stats(replicas)``) or kept by this view itself (``Stats()``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import orjson

from cache.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    BlockSWAEvicted,
    BlockSWARestored,
    EventBatch,
)
from consumers.errors import ViewStateError
from consumers.views.replica import ReplicaSet


@dataclass(slots=True)
class Churn:
    """Cumulative per-source counts of what happened to blocks."""

    batches: int = 0
    stored: int = 0
    removed: int = 0
    swa_evicted: int = 0
    swa_restored: int = 0
    cleared: int = 0

    def count(self, batch: EventBatch) -> None:
        """Add the events of ``batch``."""
        self.batches += 1
        for event in batch.events:
            match event:
                case BlockStored():
                    self.stored += len(event.block_hashes)
                case BlockRemoved():
                    self.removed += len(event.block_hashes)
                case BlockSWAEvicted():
                    self.swa_evicted += len(event.block_hashes)
                case BlockSWARestored():
                    self.swa_restored += len(event.block_hashes)
                case AllBlocksCleared():
                    self.cleared += 1


_CHURN_FIELDS = frozenset(f.name for f in fields(Churn))


@dataclass(frozen=True, slots=True)
class SourceStats:
    """What ``Stats.get`` reports for one source."""

    blocks: int
    tombstones: int
    diverged: str | None
    churn: Churn

    def as_dict(self) -> dict[str, int | str | None]:
        """A flat dict (for metrics endpoints)."""
        flat: dict[str, int | str | None] = {
            "blocks": self.blocks,
            "tombstones": self.tombstones,
            "diverged": self.diverged,
        }
        flat.update(asdict(self.churn))
        return flat


class Stats:
    """Per-source counts, kept from batches."""

    def __init__(self, replicas: ReplicaSet | None = None, *, name: str = "stats") -> None:
        self._name = name
        self._shared = replicas
        self._replicas = replicas if replicas is not None else ReplicaSet(name=name)
        self._churn: dict[str, Churn] = {}

    @property
    def name(self) -> str:
        """This view's name in snapshots."""
        return self._name

    @property
    def shared_replicas(self) -> ReplicaSet | None:
        """The ``ReplicaSet`` these counts read, when this view keeps none of its own."""
        return self._shared

    def apply(self, batch: EventBatch) -> None:
        """Count one batch (and apply it to own replicas, when not shared)."""
        self._churn.setdefault(batch.source, Churn()).count(batch)
        if self._shared is None:
            self._replicas.apply(batch)

    def mark_diverged(self, source: str, reason: str) -> None:
        """Record that ``source`` is diverged."""
        self._replicas.mark_diverged(source, reason)

    def sources(self) -> list[str]:
        """Every source counted, sorted."""
        return sorted(set(self._churn) | set(self._replicas))

    def get(self, source: str) -> SourceStats:
        """The counts of ``source`` (zeros when never seen)."""
        tree = self._replicas.get(source)
        return SourceStats(
            blocks=0 if tree is None else len(tree),
            tombstones=0 if tree is None else tree.tombstone_count,
            diverged=None if tree is None else tree.diverged,
            churn=self._churn.get(source, Churn()),
        )

    def as_dict(self) -> dict[str, dict[str, int | str | None]]:
        """source -> flat counts."""
        return {source: self.get(source).as_dict() for source in self.sources()}

    def snapshot(self) -> bytes:
        """Churn counters (JSON line) followed by own replicas when not shared."""
        churn = orjson.dumps({s: asdict(c) for s, c in self._churn.items()})
        replicas = b"" if self._shared is not None else self._replicas.snapshot()
        return churn + b"\n" + replicas

    def load(self, data: bytes) -> None:
        """Replace the counts with what ``snapshot`` wrote."""
        head, newline, replicas = data.partition(b"\n")
        if not newline:
            raise ViewStateError(self._name, "missing the churn line")
        try:
            raw = orjson.loads(head)
        except orjson.JSONDecodeError as exc:
            raise ViewStateError(self._name, f"churn is not JSON: {exc}") from None
        if type(raw) is not dict:
            raise ViewStateError(self._name, "churn must be an object")
        churn: dict[str, Churn] = {}
        for source, counts in raw.items():
            if type(counts) is not dict or counts.keys() != _CHURN_FIELDS:
                raise ViewStateError(self._name, f"churn of {source!r} has the wrong fields")
            if not all(type(v) is int and v >= 0 for v in counts.values()):
                raise ViewStateError(self._name, f"churn of {source!r} has a bad count")
            churn[source] = Churn(**counts)
        if self._shared is None:
            self._replicas.load(replicas)
        elif replicas:
            raise ViewStateError(self._name, "shared stats carry no replicas of their own")
        self._churn = churn
