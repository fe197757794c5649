"""Typed errors of the log package. Each says whether retrying the same call can help."""

from __future__ import annotations

from cache.errors import SwaEsError


class LogError(SwaEsError):
    """Base class of every log error."""


class ConfigError(LogError, ValueError):
    """A log URL or option is wrong; ``what`` names it."""

    def __init__(self, what: str, reason: str) -> None:
        self.what = what
        self.reason = reason
        super().__init__(f"bad log configuration {what}: {reason}")


class LogClosedError(LogError):
    """The log was closed (or its background task died) before the call could finish."""


class LogLockedError(LogError):
    """Another writer holds the log directory's lock."""

    retriable = True

    def __init__(self, path: str, holder: str = "") -> None:
        self.path = path
        self.holder = holder
        detail = f" (held by {holder})" if holder else ""
        super().__init__(f"log directory {path} is locked by another writer{detail}")


class NotALogError(LogError):
    """A path given as a log holds no log (missing, or something else, like a snapshot store);
    ``path`` names it, ``reason`` says what is there instead."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class LogDamageError(LogError):
    """Part of the log is damaged or missing: reading stops there, after every good record
    before it. ``segment`` names the segment file, ``offset`` the first record the damage
    takes, ``reason`` what is wrong."""

    def __init__(self, segment: str, offset: int, reason: str, message: str) -> None:
        self.segment = segment
        self.offset = offset
        self.reason = reason
        super().__init__(message)


class CorruptRecordError(LogDamageError):
    """A record cannot be framed or fails its checks (damage in the middle of the log or in a
    sealed segment, not a torn tail a writer's recovery cuts); earlier records stay readable.
    ``byte_position`` is where its frame starts in the segment file (None where the backend
    has no files)."""

    def __init__(
        self, segment: str, offset: int, reason: str, *, byte_position: int | None = None
    ) -> None:
        self.byte_position = byte_position
        super().__init__(segment, offset, reason, self._describe(segment, offset, reason))

    def _describe(self, segment: str, offset: int, reason: str) -> str:
        where = "" if self.byte_position is None else f" (byte {self.byte_position})"
        return f"corrupt record at offset {offset} in segment {segment}{where}: {reason}"


class MissingSegmentError(CorruptRecordError):
    """A segment file the log needs is gone (its index file says it should be there);
    ``offset`` is the first offset it held. A ``CorruptRecordError`` without a byte position,
    so code that handles damage handles it too."""

    def __init__(self, segment: str, offset: int, reason: str) -> None:
        super().__init__(segment, offset, reason)

    def _describe(self, segment: str, offset: int, reason: str) -> str:
        return f"segment {segment} (offsets from {offset}) is missing: {reason}"


class LogUnavailableError(LogError):
    """The log's service cannot be reached or refused the request; retrying may help."""

    retriable = True


class LogWriteError(LogError):
    """An append failed; ``retriable`` says whether retrying it can help."""

    def __init__(self, message: str, *, retriable: bool) -> None:
        super().__init__(message)
        self.retriable = retriable


class LogDiskFullError(LogWriteError):
    """An append found no space left on the log's disk (ENOSPC, or EDQUOT over a quota).

    The torn record the failed call left was cut off, so no partial record stays on disk and
    every earlier record is intact; the same open log accepts appends again once space is freed.
    ``directory`` is the log's directory, ``mount_point`` the filesystem holding it, and
    ``records_written`` how many of the failed call's records reached the log before the disk
    filled (the complete ones are kept; an ``append_batch`` may leave a prefix).
    """

    def __init__(
        self, directory: str, mount_point: str, detail: str, *, records_written: int = 0
    ) -> None:
        self.directory = directory
        self.mount_point = mount_point
        self.records_written = records_written
        super().__init__(
            f"no space left on the disk holding log {directory} "
            f"(filesystem mounted at {mount_point}): {detail}; "
            "no partial record was kept; free space and retry",
            retriable=True,
        )
