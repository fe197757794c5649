"""Past-tense KV-cache events and the batch that carries them.

Events are plain frozen data. Field names follow sglang's and vLLM's ``kv_events`` so that their
consumers can read ours; ``BlockSWAEvicted`` and ``BlockSWARestored`` are ours (sglang is silent
when a node loses or regains its sliding-window KV).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

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

BATCH_VERSION: Final = 1


@dataclass(frozen=True, slots=True)
class EventBatch:
    """The events of one scheduler step of one source: one log record.

    ``seq`` counts batches from 0 within one ``(source, epoch)``. ``meta`` is set on the first
    batch of every epoch (``page_size``, ``sliding_window_size``, ...). ``digest`` is the
    primary's ``state_digest()`` after this batch, written every N batches.
    """

    source: str
    epoch: str
    seq: int
    ts: float
    events: tuple[Event, ...]
    digest: str | None = None
    meta: dict[str, Any] | None = field(default=None, hash=False)
    v: int = BATCH_VERSION
