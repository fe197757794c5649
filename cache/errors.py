"""The cache's errors: one base, so a caller can catch everything the cache raises at once."""

from __future__ import annotations


class CacheError(Exception):
    """Base of every error the cache raises on purpose."""


class LockError(CacheError, ValueError):
    """A lock or unlock request that does not fit the tree (stale handle, tombstone in window)."""


class SanityError(CacheError, AssertionError):
    """An invariant of the tree or its pools does not hold."""
