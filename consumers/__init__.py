"""Consumers of the event log: the ``Follower``, its views and its snapshot stores.

This package imports only ``cache.events`` and ``log`` (never torch or the tree).
"""

from consumers.cursor import Cursors, SourceCursor, Verdict
from consumers.errors import (
    ConsumerError,
    SnapshotError,
    ViewConsistencyError,
    ViewStateError,
)
from consumers.follower import Follower
from consumers.metrics import FollowerMetrics
from consumers.snapshot_store import SnapshotStore
from consumers.snapshots import (
    DirectorySnapshotStore,
    KafkaSnapshotStore,
    Snapshot,
    SnapshotInfo,
    SnapshotStorage,
    open_snapshot_store,
)
from consumers.views.prefix_index import PrefixIndex, PrefixMatch
from consumers.views.replica import ReplicaBlock, ReplicaSet, ReplicaTree, SourceMeta
from consumers.views.stats import Churn, SourceStats, Stats
from consumers.views.view import DigestView, View

__all__ = [
    "Follower",
    "FollowerMetrics",
    "ReplicaSet",
    "ReplicaTree",
    "ReplicaBlock",
    "SourceMeta",
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
    "ViewConsistencyError",
    "ViewStateError",
]
