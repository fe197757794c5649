"""A follower view over the pure-Python reference replica set (a test double).

It takes ``EventBatch`` objects (it has no ``apply_wire``), so a follower makes the events of each
batch for it: the path every view without a native fast path takes. Tests run it beside the
native views and compare.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cache.events import DIGEST_ALGORITHM, EventBatch
from tests.oracles.replica import ReferenceReplicaSet


class ReferenceView:
    """The reference replicas as a ``View`` (and a ``DigestView``)."""

    def __init__(self, name: str = "reference") -> None:
        self._name = name
        self.replicas = ReferenceReplicaSet()
        self.metas: dict[str, Mapping[str, Any]] = {}

    @property
    def name(self) -> str:
        """This view's name in snapshots."""
        return self._name

    def apply(self, batch: EventBatch) -> None:
        """Meta first, then the events; a misfit raises ``ReplicaConsistencyError``."""
        if batch.meta is not None:
            self.replicas.set_meta(batch.source, batch.meta)
            self.metas[batch.source] = batch.meta
        self.replicas.apply_events(batch.source, batch.events)

    def mark_diverged(self, source: str, reason: str) -> None:
        """As the reference does: until its next clear."""
        self.replicas.mark_diverged(source, reason)

    def source_digest(self, source: str) -> str | None:
        """The held digest when the source's meta names this build's algorithm."""
        meta = self.metas.get(source)
        if meta is None or meta.get("digest_alg") != DIGEST_ALGORITHM:
            return None
        return self.replicas.replica(source).digest.hexdigest()

    def snapshot(self) -> bytes:
        """Not snapshotted (tests only)."""
        return b""

    def load(self, data: bytes) -> None:
        """Nothing to load."""
