"""Errors a ``Publisher`` raises to every waiter once it can no longer publish."""

from __future__ import annotations

from cache.errors import SwaEsError


class PublisherError(SwaEsError):
    """Base class of the publisher's own errors."""


class PublisherFailedError(PublisherError):
    """The background append task died; ``__cause__`` (and ``cause``) is the log's error.

    Every later ``step()``, ``flush()`` and ``wait_ready()`` raises it: batches queued after the
    failure are never durable, and batches already durable are untouched.
    """

    def __init__(self, source: str, cause: BaseException) -> None:
        self.source = source
        self.cause = cause
        super().__init__(f"publisher {source!r}: appending to the log failed: {cause!r}")


class PublisherClosedError(PublisherError):
    """The publisher is not running: used before ``async with`` or after leaving it."""
