"""Past-tense KV-cache events and the batch that carries them.

Events are plain frozen data. Field names follow sglang's and vLLM's ``kv_events`` so that their
consumers can read ours; ``BlockSWAEvicted`` and ``BlockSWARestored`` are ours (sglang is silent
when a node loses or regains its sliding-window KV).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, TypeAlias

from cache.events.meta import BatchMeta

MEDIUM_GPU: Final = "GPU"


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
    """The pages of one node left the tree (full eviction or tombstone clean-up)."""

    block_hashes: tuple[int, ...]
    medium: str | None = MEDIUM_GPU


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

BATCH_VERSION: Final = 2
"""The wire version written by default: version 2 joins chained stores (docs/design.md §4)."""


@dataclass(frozen=True, slots=True)
class EventBatch:
    """The events of one scheduler step of one source: one log record.

    ``seq`` counts batches from 0 within one ``(source, epoch)``. ``meta`` is set on the first
    batch of every epoch (a ``BatchMeta``: ``page_size``, ``sliding_window_size``,
    ``digest_alg``, ...). ``digest`` is the primary's ``state_digest()`` after this batch, written
    every N batches. ``v`` is the wire version the batch was read from or will be written as
    (1: one object per event; 2: chained stores joined); a decoded batch has one
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
