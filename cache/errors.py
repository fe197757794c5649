"""The project's root error, ``SwaEsError``, and the cache's errors.

Every error class of the four packages derives from ``SwaEsError`` (also importable as
``swa_es.SwaEsError``), so a caller can catch everything the project raises on purpose at once;
each package's own base (``CacheError``, ``log.LogError``, ``consumers.ConsumerError``,
``swa_es.PublisherError``, ...) narrows that down, and ``retriable`` says whether trying again
can help. This module imports nothing, so every package may import it: it is the one module of
``cache`` that ``log`` and ``swa_es.client`` import (docs/design.md §2; the import-linter
contracts in pyproject.toml keep it a leaf).
"""

from __future__ import annotations


class SwaEsError(Exception):
    """Base of every error swa-es raises on purpose (its subclasses may also derive from the
    built-in they refine, e.g. ``ValueError``)."""

    retriable: bool = False
    """Whether the same call may succeed if made again unchanged (a transient condition: a
    lock held elsewhere, a full disk, a server restoring or out of reach); a class or an
    instance that knows says so, every other error is not."""


class CacheError(SwaEsError):
    """Base of every error the cache raises on purpose."""


class LockError(CacheError, ValueError):
    """A lock or unlock request that does not fit the tree (stale handle, tombstone in window)."""


class SanityError(CacheError, AssertionError):
    """An invariant of the tree or its pools does not hold."""
