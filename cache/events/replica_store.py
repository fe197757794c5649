"""The native replica block store, typed: every source's blocks in compact arrays.

``ReplicaStore`` (from the native core) applies batches to per-source block tables (decoded
records straight from their ``WireBatch``, with no Python object per event), answers residency
and block lookups, keeps each source's state digest, writes and loads its whole state as
checksummed bytes, and matches a prompt against every source in one walk (through a holder
index, block hash -> sources, kept once ``enable_prefix_index`` is called). Consumers reach it
through this module (never ``cache.events._native``); ``consumers.views`` wraps it in the public
``ReplicaSet`` / ``PrefixIndex`` / ``Stats`` API. The pure-Python twin is
``tests.oracles.replica``.

``apply_records`` is the follower's replay fast lane: it decodes and applies a run of log records
in one call while each is the plain next batch of a source that its ``ReplayCursors`` trust (no
meta, no digest, the next seq of the source's epoch), and stops at the first record that needs
the follower's own judgement.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

from cache.events import _native
from cache.events.codec import WireBatch
from cache.events.errors import ReplicaConsistencyError, ReplicaSnapshotError

ReplicaStore = _native.ReplicaStore
ReplayCursors = _native.ReplayCursors


ChurnCounts: TypeAlias = tuple[int, dict[str, int], list[tuple[str, str | None, int]]]
"""What batches did to a source's blocks: (batches, the count of each event type by its name:
blocks for a type that names blocks, events for one that does not, and the removals split by
``(medium, reason or None, blocks)``)."""


def wire_churn(wire: WireBatch) -> ChurnCounts:
    """The churn of one decoded record, counted natively without making its events."""
    return _native.wire_churn(wire)


def apply_records(
    store: ReplicaStore,
    records: list[bytes],
    start: int,
    limit: int,
    max_record_bytes: int,
    cursors: ReplayCursors,
) -> tuple[
    int,
    int,
    float | None,
    list[tuple[str, int]],
    tuple[str, str] | None,
    list[tuple[str, ChurnCounts]],
]:
    """Decode and apply ``records[start:]`` (at most ``limit``) into ``store`` while each is the
    plain next batch of a source ``cursors`` trust; stop before the first that is not.

    Returns (records consumed, their events counted one per page, the last one's ``ts``, the
    advanced sources with their new last seqs in order, a source possibly more than once: its last
    is its new seq, and ``(source, reason)`` when the last consumed record did not fit its
    replica: its events before the failing one stay applied), and ``(source, churn)`` of what
    the records did to each advanced source (a source possibly more than once: add them up).
    ``cursors`` move with the records consumed."""
    return _native.apply_records(store, records, start, limit, max_record_bytes, cursors)


def prompt_token_ids(token_ids: Sequence[int]) -> list[int]:
    """The ids ``ReplicaStore.match_prefix`` reads ``token_ids`` as, with its errors (for tests
    of the reader: a list through the C API, a buffer in bulk, anything else by iteration)."""
    return _native.prompt_token_ids(token_ids)


__all__ = [
    "ChurnCounts",
    "ReplicaConsistencyError",
    "ReplicaSnapshotError",
    "ReplicaStore",
    "ReplayCursors",
    "apply_records",
    "prompt_token_ids",
    "wire_churn",
]
