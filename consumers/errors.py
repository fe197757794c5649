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
