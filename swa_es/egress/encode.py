"""Our batches in an engine's msgpack wire format, byte for byte what the engine's own publisher
encodes for the same events, so an existing router reads them unchanged.

- ``sglang`` (0.5.16, ``sglang.srt.disaggregation.kv_events``): the batch is the array
  ``[ts, events, attn_dp_rank]``; events are tagged arrays, one ``BlockStored`` per page as its
  radix cache records them: ``["BlockStored", [hash], parent, token_ids, block_size, lora_id,
  medium]``, ``["BlockRemoved", hashes, medium]``, ``["AllBlocksCleared"]`` (a ``medium`` of
  None written as nil: msgspec writes every field of an array-like struct).
- ``vllm`` (0.33.0, ``vllm.distributed.kv_events``): the batch is the array
  ``[ts, events, data_parallel_rank]``; events are tagged maps in the field order of vLLM's
  msgspec classes, every field without a default written, and ``group_idx`` (always set by its
  block pool; ours is the one full-attention group, 0). A store of several pages stays one
  ``BlockStored`` (the form of vLLM's ``cache_full_blocks``); the log holds one page a store.

Both publishers stamp the batch with their data-parallel rank (0 for a single engine), which
consumers such as Dynamo's indexer require. Engines have no tombstone events.
``TombstonePolicy`` says what ours become: ``keep`` sends nothing (the consumer keeps the block as
cached: its full KV is still resident, and that is what sglang's own stream says), ``remove``
sends ``BlockRemoved`` for a tombstoned block (the consumer stops counting it; the later
``BlockSWARestored`` is not sent, so it stays forgotten).
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
)

DATA_PARALLEL_RANK = 0
"""The rank both engines' publishers stamp on a batch of a single (non data-parallel) engine."""

VLLM_GROUP_IDX = 0
"""vLLM's KV-cache group of our blocks: the one full-attention group."""


class EngineFormat(enum.StrEnum):
    """The wire format of the stream out."""

    SGLANG = "sglang"
    VLLM = "vllm"


class TombstonePolicy(enum.StrEnum):
    """What a ``BlockSWAEvicted`` becomes for a consumer that does not know SWA."""

    KEEP = "keep"
    REMOVE = "remove"


def _tombstone(event: BlockSWAEvicted, tombstones: TombstonePolicy) -> list[Event]:
    if tombstones is TombstonePolicy.REMOVE:
        return [BlockRemoved(event.block_hashes, MEDIUM_GPU)]
    return []


def _engine_events(event: Event, tombstones: TombstonePolicy) -> list[Event]:
    """``event`` as the events an engine has (stores, removals, clears)."""
    match event:
        case BlockStored() | BlockRemoved() | AllBlocksCleared():
            return [event]
        case BlockSWAEvicted():
            return _tombstone(event, tombstones)
        case BlockSWARestored():
            return []
    raise TypeError(f"not an event: {event!r}")


def _sglang_event(event: Event) -> list[list[Any]]:
    match event:
        case BlockStored():
            size = event.block_size
            parent = event.parent_block_hash
            out: list[list[Any]] = []
            for index, block_hash in enumerate(event.block_hashes):
                tokens = list(event.token_ids[index * size : (index + 1) * size])
                out.append(
                    ["BlockStored", [block_hash], parent, tokens, size, event.lora_id, event.medium]
                )
                parent = block_hash
            return out
        case BlockRemoved():
            return [["BlockRemoved", list(event.block_hashes), event.medium]]
        case _:
            return [["AllBlocksCleared"]]


def _vllm_event(event: Event) -> dict[str, Any]:
    match event:
        case BlockStored():
            return {
                "type": "BlockStored",
                "block_hashes": list(event.block_hashes),
                "parent_block_hash": event.parent_block_hash,
                "token_ids": list(event.token_ids),
                "block_size": event.block_size,
                "lora_id": event.lora_id,
                "medium": event.medium,
                "lora_name": None,
                "group_idx": VLLM_GROUP_IDX,
            }
        case BlockRemoved():
            return {
                "type": "BlockRemoved",
                "block_hashes": list(event.block_hashes),
                "medium": event.medium,
                "group_idx": VLLM_GROUP_IDX,
            }
        case _:
            return {"type": "AllBlocksCleared"}


def engine_events(
    batch: EventBatch, fmt: EngineFormat, tombstones: TombstonePolicy = TombstonePolicy.KEEP
) -> list[Any]:
    """The events of ``batch`` as ``fmt``'s msgpack-ready values (what the payload lists)."""
    engine = [e for event in batch.events for e in _engine_events(event, tombstones)]
    if fmt is EngineFormat.SGLANG:
        return [item for event in engine for item in _sglang_event(event)]
    return [_vllm_event(event) for event in engine]


def _array_header(length: int) -> bytes:
    if length < 16:
        return bytes([0x90 | length])
    if length < 1 << 16:
        return b"\xdc" + length.to_bytes(2, "big")
    return b"\xdd" + length.to_bytes(4, "big")


def _pack(value: Any) -> bytes:
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


def _vllm_event_bytes(event: Event) -> bytes:
    fields = _vllm_event(event)
    if not isinstance(event, BlockStored):
        return _pack(fields)
    # msgspec sizes a struct's map header by how many fields the class has, not how many it
    # writes: vLLM's BlockStored has more than 15, so its map always has a 16-bit header.
    body = b"".join(_pack(key) + _pack(value) for key, value in fields.items())
    return b"\xde" + len(fields).to_bytes(2, "big") + body


def encode_engine_batch(
    batch: EventBatch, fmt: EngineFormat, tombstones: TombstonePolicy = TombstonePolicy.KEEP
) -> bytes:
    """The msgpack payload of ``batch`` in ``fmt``: ``[ts, events, data_parallel_rank]``."""
    if fmt is EngineFormat.SGLANG:
        sglang_events = engine_events(batch, fmt, tombstones)
        return _pack([float(batch.ts), sglang_events, DATA_PARALLEL_RANK])
    engine = [e for event in batch.events for e in _engine_events(event, tombstones)]
    events = [_vllm_event_bytes(event) for event in engine]
    return b"".join(
        [
            _array_header(3),
            _pack(float(batch.ts)),
            _array_header(len(events)),
            *events,
            _pack(DATA_PARALLEL_RANK),
        ]
    )
