"""Snapshot stores: a directory on the follower's disk, or a compacted Kafka topic shared by
followers on any machine. Both implement ``SnapshotStorage``; ``open_snapshot_store(url)``
opens the one a URL names."""

from consumers.snapshots.base import Snapshot, SnapshotInfo, SnapshotStorage
from consumers.snapshots.directory import DirectorySnapshotStore
from consumers.snapshots.kafka_store import KafkaSnapshotStore
from consumers.snapshots.opening import open_snapshot_store

__all__ = [
    "DirectorySnapshotStore",
    "KafkaSnapshotStore",
    "Snapshot",
    "SnapshotInfo",
    "SnapshotStorage",
    "open_snapshot_store",
]
