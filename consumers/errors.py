"""Typed errors of the consumers package."""

from __future__ import annotations


class ConsumerError(Exception):
    """Base class of every consumers error."""


class ViewConsistencyError(ConsumerError):
    """A batch does not fit a view's state (unknown block or parent, block stored twice...).

    The follower catches it and marks ``source`` diverged; it never reaches the caller of
    ``catch_up`` or ``run``.
    """

    def __init__(self, source: str, reason: str) -> None:
        self.source = source
        self.reason = reason
        super().__init__(f"source {source!r}: {reason}")


class ViewStateError(ConsumerError):
    """``load`` was given bytes that are not a snapshot of this view; ``view`` names it."""

    def __init__(self, view: str, reason: str) -> None:
        self.view = view
        self.reason = reason
        super().__init__(f"bad snapshot of view {view!r}: {reason}")


class SnapshotError(ConsumerError):
    """A snapshot file is corrupt, of a foreign version, or does not fit the follower."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"snapshot {path}: {reason}")
