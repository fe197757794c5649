"""Typed errors of the consumers package."""

from __future__ import annotations

from cache.errors import SwaEsError


class ConsumerError(SwaEsError):
    """Base class of every consumers error."""


class ViewStateError(ConsumerError):
    """``load`` was given bytes that are not a snapshot of this view; ``view`` names it."""

    def __init__(self, view: str, reason: str) -> None:
        self.view = view
        self.reason = reason
        super().__init__(f"bad snapshot of view {view!r}: {reason}")


class SnapshotError(ConsumerError):
    """A snapshot is corrupt, incomplete, of a foreign version, or does not fit the follower;
    ``path`` says where it is (a file, or a Kafka topic and key)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"snapshot {path}: {reason}")


class ForeignSnapshotError(SnapshotError):
    """A snapshot is not of the log it would be restored onto: it records another log's
    identity (another log, or this one before it was wiped and written again), or its position
    lies beyond the log's end. Restoring it would take a foreign position and skip the log's
    own records, so it is refused.

    ``store`` and ``snapshot`` say where it is, ``log`` which log it was to be restored onto;
    ``snapshot_log_id`` and ``log_id`` are the two identities (None: not recorded).
    """

    def __init__(
        self,
        *,
        store: str,
        snapshot: str,
        log: str,
        snapshot_log_id: str | None,
        log_id: str | None,
        reason: str,
    ) -> None:
        self.store = store
        self.snapshot = snapshot
        self.log = log
        self.snapshot_log_id = snapshot_log_id
        self.log_id = log_id
        super().__init__(snapshot, reason)
