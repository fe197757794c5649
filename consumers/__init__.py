"""Consumers of the event log: the ``Follower``, its views and its snapshot stores.

This package imports only ``cache.events`` and ``log`` (never torch or the tree).
"""

from typing import TYPE_CHECKING, Any

from cache.events.replica_store import ReplicaConsistencyError
from consumers.cursor import Cursors, SourceCursor, Verdict
from consumers.errors import ConsumerError, ForeignSnapshotError, SnapshotError, ViewStateError
from consumers.follower import Follower
from consumers.metrics import FollowerMetrics
from consumers.snapshots import (
    DirectorySnapshotStore,
    Snapshot,
    SnapshotInfo,
    SnapshotStorage,
    open_snapshot_store,
)

# SnapshotStore: the directory store under its first name, kept for code that uses it
from consumers.snapshots.directory import DirectorySnapshotStore as SnapshotStore
from consumers.views.prefix_index import PrefixIndex, PrefixMatch
from consumers.views.replica import ReplicaBlock, ReplicaSet, ReplicaTree
from consumers.views.stats import Churn, SourceStats, Stats
from consumers.views.view import DigestView, View

if TYPE_CHECKING:
    from consumers.snapshots.kafka_store import KafkaSnapshotStore


def __getattr__(name: str) -> Any:
    # KafkaSnapshotStore needs aiokafka (the optional `kafka` extra): imported on first use only.
    if name == "KafkaSnapshotStore":
        import consumers.snapshots

        return consumers.snapshots.KafkaSnapshotStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Follower",
    "FollowerMetrics",
    "ReplicaSet",
    "ReplicaTree",
    "ReplicaBlock",
    "PrefixIndex",
    "PrefixMatch",
    "Stats",
    "SourceStats",
    "Churn",
    "SnapshotStore",
    "SnapshotStorage",
    "DirectorySnapshotStore",
    "KafkaSnapshotStore",
    "open_snapshot_store",
    "Snapshot",
    "SnapshotInfo",
    "View",
    "DigestView",
    "Cursors",
    "SourceCursor",
    "Verdict",
    "ConsumerError",
    "SnapshotError",
    "ForeignSnapshotError",
    "ReplicaConsistencyError",
    "ViewStateError",
]
