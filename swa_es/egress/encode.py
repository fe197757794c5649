"""Our batches in an engine's msgpack wire format, so an existing router reads them unchanged.

- ``sglang`` (0.5.16): ``[ts, [events...]]`` with tagged-array events, one ``BlockStored`` per
  page: ``["BlockStored", [hash], parent, token_ids, block_size, lora_id, medium]``,
  ``["BlockRemoved", hashes, medium]``, ``["AllBlocksCleared"]``.
- ``vllm``: ``[ts, [events...]]`` with tagged-map events (``{"type": "BlockStored", ...}``),
  a chain of pages in one ``BlockStored`` (vLLM's multi-block form), ``lora_name`` null.

Engines have no tombstone events. ``TombstonePolicy`` says what ours become: ``keep`` sends
nothing (the consumer keeps the block as cached: its full KV is still resident, and that is
what sglang's own stream says), ``remove`` sends ``BlockRemoved`` for a tombstoned block (the
consumer stops counting it; the later ``BlockSWARestored`` is not sent, so it stays forgotten).
"""

from __future__ import annotations

import enum
from typing import Any

import msgpack

from cache.events import (
    MEDIUM_GPU,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    BlockSWAEvicted,
    BlockSWARestored,
    Event,
    EventBatch,
    event_to_dict,
)


class EngineFormat(enum.StrEnum):
    """The wire format of the stream out."""

    SGLANG = "sglang"
    VLLM = "vllm"


class TombstonePolicy(enum.StrEnum):
    """What a ``BlockSWAEvicted`` becomes for a consumer that does not know SWA."""

    KEEP = "keep"
    REMOVE = "remove"


def _sglang_events(event: Event, tombstones: TombstonePolicy) -> list[list[Any]]:
    match event:
        case BlockStored():
            size = event.block_size
            parent = event.parent_block_hash
            out: list[list[Any]] = []
            for index, block_hash in enumerate(event.block_hashes):
                tokens = list(event.token_ids[index * size : (index + 1) * size])
                item: list[Any] = ["BlockStored", [block_hash], parent, tokens, size, event.lora_id]
                if event.medium is not None:
                    item.append(event.medium)
                out.append(item)
                parent = block_hash
            return out
        case BlockRemoved():
            removed: list[Any] = ["BlockRemoved", list(event.block_hashes)]
            if event.medium is not None:
                removed.append(event.medium)
            return [removed]
        case AllBlocksCleared():
            return [["AllBlocksCleared"]]
        case BlockSWAEvicted():
            if tombstones is TombstonePolicy.REMOVE:
                return [["BlockRemoved", list(event.block_hashes), "GPU"]]
            return []
        case BlockSWARestored():
            return []
    raise TypeError(f"not an event: {event!r}")


def _vllm_events(event: Event, tombstones: TombstonePolicy) -> list[dict[str, Any]]:
    # vLLM's tagged maps are our own event objects (cache.events.event_to_dict), plus its
    # lora_name on a store; a tombstone becomes a removal or nothing.
    match event:
        case BlockStored():
            return [{**event_to_dict(event), "lora_name": None}]
        case BlockRemoved() | AllBlocksCleared():
            return [event_to_dict(event)]
        case BlockSWAEvicted():
            if tombstones is TombstonePolicy.REMOVE:
                return [event_to_dict(BlockRemoved(event.block_hashes, MEDIUM_GPU))]
            return []
        case BlockSWARestored():
            return []
    raise TypeError(f"not an event: {event!r}")


def encode_engine_batch(
    batch: EventBatch, fmt: EngineFormat, tombstones: TombstonePolicy = TombstonePolicy.KEEP
) -> bytes:
    """The msgpack payload of ``batch`` in ``fmt``."""
    events: list[Any] = []
    for event in batch.events:
        if fmt is EngineFormat.SGLANG:
            events.extend(_sglang_events(event, tombstones))
        else:
            events.extend(_vllm_events(event, tombstones))
    packed: bytes = msgpack.packb([batch.ts, events], use_bin_type=True)
    return packed
