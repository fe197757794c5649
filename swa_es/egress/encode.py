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
consumers such as Dynamo's indexer require. A batch of a token-free source (its meta says
``token_ids: false``, or a store of pages comes without token ids) is refused with
``TokenIdsWithheldError`` (``check_token_ids``): no store is ever sent with an empty token list
as if it had tokens. (vLLM's lower-tier placeholder, block size 0 and no tokens, is not such a
store.) Engines have no tombstone events.
``TombstonePolicy`` says what ours become: ``keep`` sends nothing (the consumer keeps the block as
cached: its full KV is still resident, and that is what sglang's own stream says), ``remove``
sends ``BlockRemoved`` for a tombstoned block (the consumer stops counting it; the later
``BlockSWARestored`` is not sent, so it stays forgotten). ``groups`` (vLLM) and ``events``
(sglang) carry SWA residency in the shapes consumers of those engines read, with the run's state
in a ``ResidencyStream`` (``swa_es.egress.residency``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import msgpack

from cache.events import (
    MEDIUM_GPU,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    BlockSWAEvicted,
    Event,
    EventBatch,
)
from cache.events.types import EVENT_TYPES
from swa_es.egress.config import EngineFormat, TombstonePolicy
from swa_es.egress.errors import TokenIdsWithheldError
from swa_es.egress.residency import FULL_KIND, SWA_GROUP, SWA_KIND, ResidencyStream

DATA_PARALLEL_RANK = 0
"""The rank both engines' publishers stamp on a batch of a single (non data-parallel) engine."""

VLLM_GROUP_IDX = 0
"""vLLM's KV-cache group of our blocks: the one full-attention group."""


ENGINE_EVENT_TYPES: Final = (BlockStored, BlockRemoved, AllBlocksCleared)
"""Our event types that both engines have: sent as they are. An event of any other type is sent
as its substitute (``_SUBSTITUTES``), or not at all (``BlockSWARestored``: docs above)."""


def _tombstone(event: Event, tombstones: TombstonePolicy) -> list[Event]:
    assert isinstance(event, BlockSWAEvicted)
    if tombstones is TombstonePolicy.REMOVE:
        return [BlockRemoved(event.block_hashes, MEDIUM_GPU)]
    return []


_SUBSTITUTES: Final[dict[type[Event], Callable[[Event, TombstonePolicy], list[Event]]]] = {
    BlockSWAEvicted: _tombstone,
}
"""What an engine gets for an event of a type it does not have, under a tombstone policy."""


def _engine_events(event: Event, tombstones: TombstonePolicy) -> list[Event]:
    """``event`` as the events an engine has (stores, removals, clears)."""
    if isinstance(event, ENGINE_EVENT_TYPES):
        return [event]
    if not isinstance(event, EVENT_TYPES):
        raise TypeError(f"not an event: {event!r}")
    substitute = _SUBSTITUTES.get(type(event))
    return [] if substitute is None else substitute(event, tombstones)


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


def _vllm_event(
    event: Event, group: int = VLLM_GROUP_IDX, kind: str | None = None, window: int | None = None
) -> dict[str, Any]:
    """vLLM's fields of ``event`` in group ``group``; a store says its group's spec ``kind``
    and ``window`` when given (vLLM omits a field that is None)."""
    match event:
        case BlockStored():
            fields: dict[str, Any] = {
                "type": "BlockStored",
                "block_hashes": list(event.block_hashes),
                "parent_block_hash": event.parent_block_hash,
                "token_ids": list(event.token_ids),
                "block_size": event.block_size,
                "lora_id": event.lora_id,
                "medium": event.medium,
                "lora_name": None,
                "group_idx": group,
            }
            if kind is not None:
                fields["kv_cache_spec_kind"] = kind
            if window is not None:
                fields["kv_cache_spec_sliding_window"] = window
            return fields
        case BlockRemoved():
            return {
                "type": "BlockRemoved",
                "block_hashes": list(event.block_hashes),
                "medium": event.medium,
                "group_idx": group,
            }
        case _:
            return {"type": "AllBlocksCleared"}


def check_token_ids(batch: EventBatch) -> None:
    """``TokenIdsWithheldError`` when ``batch``'s writer withheld its token ids: its meta says
    so, or a store of pages (block size above 0) has none."""
    if batch.meta is not None and not batch.meta.token_ids:
        raise TokenIdsWithheldError(batch.source, "its epoch's meta says token_ids: false")
    for event in batch.events:
        if isinstance(event, BlockStored) and event.block_size > 0 and not event.token_ids:
            raise TokenIdsWithheldError(
                batch.source, f"BlockStored for block {event.block_hashes[0]} has no token ids"
            )


def engine_events(
    batch: EventBatch,
    fmt: EngineFormat,
    tombstones: TombstonePolicy = TombstonePolicy.KEEP,
    residency: ResidencyStream | None = None,
) -> list[Any]:
    """The events of ``batch`` as ``fmt``'s msgpack-ready values (what the payload lists);
    ``residency`` is the run's state, which ``groups`` and ``events`` need (and update).
    ``TokenIdsWithheldError`` for a token-free source's batch (``check_token_ids``)."""
    check_token_ids(batch)
    state = _state(tombstones, residency)
    if fmt is EngineFormat.SGLANG:
        if state is not None:
            return _sglang_with_extension(batch, state)
        engine = [e for event in batch.events for e in _engine_events(event, tombstones)]
        return [item for event in engine for item in _sglang_event(event)]
    return [_vllm_event(*spec) for spec in _vllm_specs(batch, tombstones, state)]


def _state(
    tombstones: TombstonePolicy, residency: ResidencyStream | None
) -> ResidencyStream | None:
    if tombstones.needs_state and residency is None:
        raise ValueError(f"tombstones {tombstones.value!r} needs the run's ResidencyStream")
    return residency if tombstones.needs_state else None


def _sglang_with_extension(batch: EventBatch, state: ResidencyStream) -> list[Any]:
    rows = state.sglang_extension(batch)
    out: list[Any] = []
    for event, extension in zip(batch.events, rows, strict=True):
        for engine in _engine_events(event, TombstonePolicy.KEEP):
            out.extend(_sglang_event(engine))
        out.extend(extension)
    return out


def _vllm_specs(
    batch: EventBatch, tombstones: TombstonePolicy, state: ResidencyStream | None
) -> list[tuple[Event, int, str | None, int | None]]:
    """(event, group, spec kind, window) of each vLLM event of ``batch``."""
    if state is None:
        engine = [e for event in batch.events for e in _engine_events(event, tombstones)]
        return [(event, VLLM_GROUP_IDX, None, None) for event in engine]
    pairs = state.vllm_groups(batch)  # reads the batch's meta first
    window = state.vllm_window(batch.source)
    specs: list[tuple[Event, int, str | None, int | None]] = []
    for event, group in pairs:
        if window is None:
            specs.append((event, group, None, None))
        elif group == SWA_GROUP:
            specs.append((event, group, SWA_KIND, window))
        else:
            specs.append((event, group, FULL_KIND, None))
    return specs


def _array_header(length: int) -> bytes:
    if length < 16:
        return bytes([0x90 | length])
    if length < 1 << 16:
        return b"\xdc" + length.to_bytes(2, "big")
    return b"\xdd" + length.to_bytes(4, "big")


def _pack(value: Any) -> bytes:
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


def _vllm_event_bytes(
    event: Event, group: int = VLLM_GROUP_IDX, kind: str | None = None, window: int | None = None
) -> bytes:
    fields = _vllm_event(event, group, kind, window)
    if not isinstance(event, BlockStored):
        return _pack(fields)
    # msgspec sizes a struct's map header by how many fields the class has, not how many it
    # writes: vLLM's BlockStored has more than 15, so its map always has a 16-bit header.
    body = b"".join(_pack(key) + _pack(value) for key, value in fields.items())
    return b"\xde" + len(fields).to_bytes(2, "big") + body


def encode_engine_batch(
    batch: EventBatch,
    fmt: EngineFormat,
    tombstones: TombstonePolicy = TombstonePolicy.KEEP,
    residency: ResidencyStream | None = None,
) -> bytes:
    """The msgpack payload of ``batch`` in ``fmt``: ``[ts, events, data_parallel_rank]``;
    ``residency`` and ``TokenIdsWithheldError`` as in ``engine_events``."""
    if fmt is EngineFormat.SGLANG:
        sglang_events = engine_events(batch, fmt, tombstones, residency)
        return _pack([float(batch.ts), sglang_events, DATA_PARALLEL_RANK])
    check_token_ids(batch)
    specs = _vllm_specs(batch, tombstones, _state(tombstones, residency))
    events = [_vllm_event_bytes(*spec) for spec in specs]
    return b"".join(
        [
            _array_header(3),
            _pack(float(batch.ts)),
            _array_header(len(events)),
            *events,
            _pack(DATA_PARALLEL_RANK),
        ]
    )
