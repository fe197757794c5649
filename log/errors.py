"""Typed errors of the log package. Each says whether retrying the same call can help."""

from __future__ import annotations


class LogError(Exception):
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
