"""Snapshot stores: a directory on the follower's disk, or a compacted Kafka topic shared by
followers on any machine. Both implement ``SnapshotStorage``; ``open_snapshot_store(url)``
opens the one a URL names."""

from typing import TYPE_CHECKING, Any

from consumers.snapshots.base import Snapshot, SnapshotInfo, SnapshotStorage
from consumers.snapshots.directory import DirectorySnapshotStore
from consumers.snapshots.opening import open_snapshot_store
from consumers.snapshots.provenance import check_snapshot_of, foreign_snapshot

if TYPE_CHECKING:
    from consumers.snapshots.kafka_store import KafkaSnapshotStore


def __getattr__(name: str) -> Any:
    # KafkaSnapshotStore needs aiokafka (the optional `kafka` extra): imported on first use only.
    if name == "KafkaSnapshotStore":
        from consumers.snapshots.kafka_store import KafkaSnapshotStore

        return KafkaSnapshotStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DirectorySnapshotStore",
    "KafkaSnapshotStore",
    "Snapshot",
    "SnapshotInfo",
    "SnapshotStorage",
    "open_snapshot_store",
    "check_snapshot_of",
    "foreign_snapshot",
]
