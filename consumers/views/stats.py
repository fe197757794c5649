"""The ``stats`` view: per source block and tombstone counts, and churn counters.

Churn counts, per event type, the blocks (one per block hash) its events name, or its events
when it names none (``cleared`` counts ``AllBlocksCleared`` events), in the count named after
the type (``churn_count_of``); ``removed_by`` splits the removals by tier and by reason
(``medium -> reason -> blocks``, a removal that does not say why counted under ``"unsaid"``).
Block and tombstone counts and divergence are read from the follower's ``ReplicaSet``, given
to ``Stats(replicas)``; this view keeps only the churn.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import ClassVar, Final

import orjson

from cache.events import BlockRemoved, Event, EventBatch, WireBatch
from cache.events.replica_store import ChurnCounts, wire_churn
from cache.events.types import EVENT_TYPES, MEDIUM_GPU
from consumers.errors import ViewStateError
from consumers.views.replica import ReplicaSet
from consumers.views.view import LaneRole

UNSAID: Final = "unsaid"
"""The reason under which ``Churn.removed_by`` counts a removal that does not say why."""


@dataclass(slots=True)
class Churn:
    """Cumulative per-source counts of what happened to blocks."""

    batches: int = 0
    stored: int = 0
    removed: int = 0
    swa_evicted: int = 0
    swa_restored: int = 0
    cleared: int = 0
    removed_by: dict[str, dict[str, int]] = field(default_factory=dict)

    def count_removal(self, medium: str | None, reason: str | None, blocks: int) -> None:
        """Count ``blocks`` removed from ``medium`` (None: the GPU) for ``reason``."""
        by_reason = self.removed_by.setdefault(medium or MEDIUM_GPU, {})
        key = reason or UNSAID
        by_reason[key] = by_reason.get(key, 0) + blocks

    def count(self, batch: EventBatch) -> None:
        """Add the events of ``batch``."""
        self.batches += 1
        for event in batch.events:
            name = _COUNTS_BY_TYPE[type(event)]
            blocks = getattr(event, "block_hashes", None)
            setattr(self, name, getattr(self, name) + (1 if blocks is None else len(blocks)))
            if isinstance(event, BlockRemoved):
                self.count_removal(event.medium, event.reason, len(event.block_hashes))

    def count_wire(self, batch: WireBatch) -> None:
        """Add the events of a decoded record, counted natively (its events are not made)."""
        self.add(wire_churn(batch))

    def add(self, counts: ChurnCounts) -> None:
        """Add native counts (``ChurnCounts``: batches, each event type's count by its name,
        the removals by tier and reason)."""
        batches, by_type, removed_by = counts
        self.batches += batches
        for medium, reason, blocks in removed_by:
            self.count_removal(medium, reason, blocks)
        for type_name, n in by_type.items():
            name = _COUNTS_BY_NAME[type_name]
            setattr(self, name, getattr(self, name) + n)


def churn_count_of(event_type: type[Event]) -> str:
    """The ``Churn`` count of ``event_type``: its name without the ``Block`` or ``AllBlocks``
    prefix, in snake case (``BlockSWAEvicted``: ``swa_evicted``)."""
    name = re.sub(r"^(AllBlocks|Block)", "", event_type.__name__)
    return re.sub(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


_CHURN_FIELDS = frozenset(f.name for f in fields(Churn))
CHURN_COUNTS: Final = tuple(f.name for f in fields(Churn) if f.name != "removed_by")
"""The scalar counts of a ``Churn``, in order."""
_COUNTS_BY_TYPE: Final = {event_type: churn_count_of(event_type) for event_type in EVENT_TYPES}
_COUNTS_BY_NAME: Final = {event_type.__name__: name for event_type, name in _COUNTS_BY_TYPE.items()}
_UNCOUNTED: Final = sorted(set(_COUNTS_BY_TYPE.values()) - set(CHURN_COUNTS))
if _UNCOUNTED:  # a new event type needs its Churn field
    raise TypeError(f"Churn has no count {_UNCOUNTED[0]!r} for an event type")


def _removed_by(raw: object) -> dict[str, dict[str, int]] | None:
    """``Churn.removed_by`` from its JSON, or None when it is not one."""
    if type(raw) is not dict:
        return None
    out: dict[str, dict[str, int]] = {}
    for medium, by_reason in raw.items():
        if type(by_reason) is not dict:
            return None
        if not all(type(n) is int and n >= 0 for n in by_reason.values()):
            return None
        out[medium] = dict(by_reason)
    return out


@dataclass(frozen=True, slots=True)
class SourceStats:
    """What ``Stats.get`` reports for one source."""

    blocks: int
    tombstones: int
    diverged: str | None
    churn: Churn

    def as_dict(self) -> dict[str, object]:
        """The counts as one dict (for metrics endpoints): the scalars flat, ``removed_by``
        as it is."""
        flat: dict[str, object] = {
            "blocks": self.blocks,
            "tombstones": self.tombstones,
            "diverged": self.diverged,
        }
        flat.update(asdict(self.churn))
        return flat


class Stats:
    """Per-source counts: churn kept from batches, blocks and tombstones read from ``replicas``.

    ``replicas`` must be one of the same follower's views (the follower checks); it applies
    every batch and every divergence. In the follower's fast lane the churn of the records the
    lane applied arrives counted natively (``count_lane``).
    """

    lane_role: ClassVar[LaneRole | None] = LaneRole.COUNTS

    def __init__(self, replicas: ReplicaSet, *, name: str = "stats") -> None:
        self._name = name
        self._replicas = replicas
        self._churn: dict[str, Churn] = {}

    @property
    def name(self) -> str:
        """This view's name in snapshots."""
        return self._name

    @property
    def replicas(self) -> ReplicaSet:
        """The replicas the block and tombstone counts are read from."""
        return self._replicas

    def apply(self, batch: EventBatch) -> None:
        """Count one batch."""
        self._churn.setdefault(batch.source, Churn()).count(batch)

    def apply_wire(self, batch: WireBatch) -> None:
        """Count one decoded record without making its events."""
        churn = self._churn.get(batch.source)
        if churn is None:
            churn = self._churn[batch.source] = Churn()
        churn.count_wire(batch)

    def count_lane(self, churn: Sequence[tuple[str, ChurnCounts]]) -> None:
        """Add what a run of the follower's fast lane applied, per source."""
        by_source = self._churn
        for source, counts in churn:
            found = by_source.get(source)
            if found is None:
                found = by_source[source] = Churn()
            found.add(counts)

    def mark_diverged(self, source: str, reason: str) -> None:
        """Nothing to do: the ``ReplicaSet`` records the divergence and ``get`` reads it."""

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

    def as_dict(self) -> dict[str, dict[str, object]]:
        """source -> flat counts."""
        return {source: self.get(source).as_dict() for source in self.sources()}

    def snapshot(self) -> bytes:
        """The churn counters as one JSON line (the replicas are the ``ReplicaSet``'s)."""
        return orjson.dumps({s: asdict(c) for s, c in self._churn.items()}) + b"\n"

    def load(self, data: bytes) -> None:
        """Replace the counts with what ``snapshot`` wrote."""
        head, newline, rest = data.partition(b"\n")
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
            if type(counts) is dict and counts.keys() == _CHURN_FIELDS - {"removed_by"}:
                counts = {**counts, "removed_by": {}}  # written before removals had reasons
            if type(counts) is not dict or counts.keys() != _CHURN_FIELDS:
                raise ViewStateError(self._name, f"churn of {source!r} has the wrong fields")
            if not all(type(counts[name]) is int and counts[name] >= 0 for name in CHURN_COUNTS):
                raise ViewStateError(self._name, f"churn of {source!r} has a bad count")
            removed_by = _removed_by(counts["removed_by"])
            if removed_by is None:
                raise ViewStateError(self._name, f"churn of {source!r} has a bad removed_by")
            churn[source] = Churn(**{**counts, "removed_by": removed_by})
        if rest:
            raise ViewStateError(self._name, "stats carry no replicas of their own")
        self._churn = churn
