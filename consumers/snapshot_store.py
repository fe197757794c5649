"""The directory snapshot store under its first name (``SnapshotStore``) and the file format's
readers; the stores live in ``consumers.snapshots``."""

from consumers.snapshots.base import Snapshot, SnapshotInfo, SnapshotStorage
from consumers.snapshots.directory import DirectorySnapshotStore
from consumers.snapshots.format import MAGIC, VERSION, read_info, read_snapshot

SnapshotStore = DirectorySnapshotStore
"""A directory of snapshots (``DirectorySnapshotStore``)."""

__all__ = [
    "MAGIC",
    "VERSION",
    "DirectorySnapshotStore",
    "Snapshot",
    "SnapshotInfo",
    "SnapshotStorage",
    "SnapshotStore",
    "read_info",
    "read_snapshot",
]
