"""The errors the native core raises (bound to it by ``cache.events.codec``): the batch codec's,
shared with its pure-Python reference, the recorder's and the replica store's."""

from __future__ import annotations

from cache.errors import SwaEsError


class DecodeError(SwaEsError, ValueError):
    """A record is not a valid event batch; ``field`` names the offending part (``""``: whole)."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}" if field else reason)

    def __reduce__(self) -> tuple[type[DecodeError], tuple[str, str]]:
        return (type(self), (self.field, self.reason))


class EventRecorderError(SwaEsError, RuntimeError):
    """The recorded ops do not fit the recorder's node table (the tree and its recorder
    disagree: a bug). Retrying cannot help; the recorder refuses every later read."""


class ReplicaConsistencyError(SwaEsError, ValueError):
    """An event does not fit a source's replica; the failing event changed nothing."""

    def __init__(self, source: str, reason: str) -> None:
        self.source = source
        self.reason = reason
        super().__init__(f"source {source!r}: {reason}")


class ReplicaSnapshotError(SwaEsError, ValueError):
    """Bytes that are not a replica snapshot this build can load (corrupt, foreign, truncated)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"bad replica snapshot: {reason}")
