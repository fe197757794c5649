"""Typed errors of the log package. Each says whether retrying the same call can help."""

from __future__ import annotations

from cache.errors import SwaEsError


class LogError(SwaEsError):
    """Base class of every log error."""

    retriable: bool = False


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


class CorruptRecordError(LogError):
    """A record in a sealed part of the log failed its checks; earlier records stay readable."""

    def __init__(self, segment: str, offset: int, reason: str) -> None:
        self.segment = segment
        self.offset = offset
        self.reason = reason
        super().__init__(f"corrupt record at offset {offset} in segment {segment}: {reason}")


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
