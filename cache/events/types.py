"""Past-tense KV-cache events and the batch that carries them.

Events are plain frozen data. Field names follow sglang's and vLLM's ``kv_events`` so that their
consumers can read ours; ``BlockSWAEvicted`` and ``BlockSWARestored`` are ours (sglang is silent
when a node loses or regains its sliding-window KV).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Final, TypeAlias, get_args

from cache.events import _native
from cache.events.meta import BatchMeta

MEDIUM_GPU: Final = "GPU"
"""The device tier; ``None`` means it too. Any other medium is a lower tier, named as its engine
names it (``"CPU"``, ``"STORAGE"``, ``"CPU_PINNED"``, ...)."""
REMOVED_EVICTED: Final = "evicted"
"""``BlockRemoved.reason``: the blocks left the cache."""
REMOVED_DEMOTED: Final = "demoted"
"""``BlockRemoved.reason``: the blocks left this tier and are still held on a lower one."""
REMOVAL_REASONS: Final = frozenset(_native.REMOVAL_REASONS)
ADDED_IN: Final = "added_in"
"""The metadata key of an event field that a later wire version added (its value: that version).
Such a field is written only when it is not None, and a batch below that version cannot carry
it set (``late_fields``)."""


@dataclass(frozen=True, slots=True)
class BlockStored:
    """One page entered the tree (its full and SWA KV are resident)."""

    block_hashes: tuple[int, ...]
    parent_block_hash: int | None
    token_ids: tuple[int, ...]
    block_size: int
    lora_id: int | None = None
    medium: str | None = MEDIUM_GPU


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """The pages of one node left the tier ``medium`` (full eviction or tombstone clean-up).

    ``reason`` says why (``REMOVED_EVICTED`` or ``REMOVED_DEMOTED``; wire version 3), ``None``
    when the writer does not know.
    """

    block_hashes: tuple[int, ...]
    medium: str | None = MEDIUM_GPU
    reason: str | None = field(default=None, metadata={ADDED_IN: 3})


@dataclass(frozen=True, slots=True)
class BlockSWAEvicted:
    """The pages of one node were tombstoned: SWA KV freed, full KV kept."""

    block_hashes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class BlockSWARestored:
    """The pages of one tombstoned node got SWA KV again."""

    block_hashes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    """Every block of the source was dropped (``reset()`` or the start of a new epoch)."""


Event: TypeAlias = (
    BlockStored | BlockRemoved | BlockSWAEvicted | BlockSWARestored | AllBlocksCleared
)
"""Every event type. Each one's dataclass fields, in order, are its wire fields: the codec, its
oracle, the churn counts and the test strategies read them from here."""

EVENT_TYPES: Final[tuple[type[Event], ...]] = get_args(Event)
"""The members of the ``Event`` union, in its order."""


def late_fields(event_type: type[Event]) -> Mapping[str, int]:
    """The fields of ``event_type`` that a later wire version added (``ADDED_IN``), by name,
    with that version."""
    return {f.name: f.metadata[ADDED_IN] for f in fields(event_type) if ADDED_IN in f.metadata}


BATCH_VERSION: Final[int] = _native.WIRE_VERSION
"""The wire version written by default: version 2 joins chained stores, version 3 adds
``BlockRemoved.reason`` (docs/design.md §4)."""


@dataclass(frozen=True, slots=True)
class EventBatch:
    """The events of one scheduler step of one source: one log record.

    ``seq`` counts batches from 0 within one ``(source, epoch)``. ``meta`` is set on the first
    batch of every epoch (a ``BatchMeta``: ``page_size``, ``sliding_window_size``,
    ``digest_alg``, ...). ``digest`` is the primary's ``state_digest()`` after this batch, written
    every N batches. ``v`` is the wire version the batch was read from or will be written as
    (1: one object per event; 2: chained stores joined; 3: removals may say why); a decoded
    batch has one
    ``BlockStored`` per page.
    """

    source: str
    epoch: str
    seq: int
    ts: float
    events: tuple[Event, ...]
    digest: str | None = None
    meta: BatchMeta | None = field(default=None, hash=False)
    v: int = BATCH_VERSION


__all__ = [
    "AllBlocksCleared",
    "BlockRemoved",
    "BlockStored",
    "BlockSWAEvicted",
    "BlockSWARestored",
    "Event",
    "EventBatch",
    "BATCH_VERSION",
    "MEDIUM_GPU",
    "REMOVAL_REASONS",
    "REMOVED_DEMOTED",
    "REMOVED_EVICTED",
]
"""What ``cache.events`` exports from here: an event type is exported where it is declared."""
