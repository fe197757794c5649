"""What every snapshot store hands out, and the ``SnapshotStorage`` interface they share.

A snapshot holds every view of a follower, its cursors, the log position they cover (just after
the last record the views include) and the digest of every source at that position. Two stores
implement the interface: ``DirectorySnapshotStore`` (files on the follower's disk) and
``KafkaSnapshotStore`` (chunks and manifests on a compacted Kafka topic, shared by machines).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from log import LogIdentity, Position


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """Where a snapshot is and what it covers (from its checked manifest).

    ``name`` is short (a file name, or ``group/generation-writer`` on Kafka); ``where`` says
    where it lives in full (a file path, or the topic URL and key). ``log_identity`` is the
    identity of the log it was taken of (None: that log had none, or the snapshot was written
    before snapshots recorded one); ``consumers.snapshots.provenance`` checks it on restore.
    """

    name: str
    where: str
    generation: int
    position: Position
    created_at: float
    size_bytes: int
    digests: dict[str, str | None] = field(default_factory=dict)
    log_identity: LogIdentity | None = None

    @property
    def path(self) -> Path:
        """The file of a directory store's snapshot (``where`` as a path)."""
        return Path(self.where)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A loaded, checked snapshot."""

    info: SnapshotInfo
    cursors: Any
    views: dict[str, bytes]


@runtime_checkable
class SnapshotStorage(Protocol):
    """Where a follower keeps its snapshots; the newest ``keep`` are kept."""

    keep: int

    @property
    def url(self) -> str:
        """Where the store lives (a directory, or a ``kafka://`` URL without secrets)."""
        ...

    async def write(
        self,
        position: Position,
        cursors: Any,
        views: Mapping[str, bytes],
        digests: Mapping[str, str | None] | None = None,
        *,
        log_identity: LogIdentity | None = None,
    ) -> SnapshotInfo:
        """Write a snapshot durably (complete, or not visible at all), then drop all but the
        newest ``keep``. ``log_identity`` is the identity of the log ``position`` is of."""
        ...

    async def infos(self) -> list[SnapshotInfo]:
        """Snapshots whose manifest checks out, oldest first (their views not checked)."""
        ...

    async def oldest_kept_position(self) -> Position | None:
        """The position of the oldest kept snapshot: the log must keep every record after it."""
        ...

    async def newest_valid(
        self, required_views: Collection[str] = (), *, older_than: int | None = None
    ) -> Snapshot | None:
        """The newest snapshot that checks out whole and holds every view in
        ``required_views`` (among generations below ``older_than`` when given); None when
        there is none. Bad snapshots are skipped with a warning naming them."""
        ...

    async def close(self) -> None:
        """Release connections (a directory store holds none)."""
        ...
