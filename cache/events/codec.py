"""The wire form of an ``EventBatch``: one JSON object per log record, encoded with orjson.

Decoding is strict: an unknown version or event type, a missing, extra or mistyped field, or an
oversized record raises ``DecodeError`` naming the field. Nothing is ever evaluated or unpickled.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any, Final

import orjson

from cache.events.types import (
    BATCH_VERSION,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    BlockSWAEvicted,
    BlockSWARestored,
    Event,
    EventBatch,
)

DEFAULT_MAX_RECORD_BYTES: Final = 16 * 1024 * 1024
_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1
_ONLY_INT: Final = {int}
_BATCH_FIELDS: Final = frozenset({"v", "source", "epoch", "seq", "ts", "events", "digest", "meta"})


class DecodeError(ValueError):
    """A record is not a valid event batch; ``field`` names the offending part (``""``: whole)."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}" if field else reason)


# --- encoding -------------------------------------------------------------------------------


def event_to_dict(event: Event) -> dict[str, Any]:
    """The JSON object of one event."""
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
            }
        case BlockRemoved():
            return {
                "type": "BlockRemoved",
                "block_hashes": list(event.block_hashes),
                "medium": event.medium,
            }
        case BlockSWAEvicted():
            return {"type": "BlockSWAEvicted", "block_hashes": list(event.block_hashes)}
        case BlockSWARestored():
            return {"type": "BlockSWARestored", "block_hashes": list(event.block_hashes)}
        case AllBlocksCleared():
            return {"type": "AllBlocksCleared"}
    raise TypeError(f"not an event: {event!r}")


def batch_to_dict(batch: EventBatch) -> dict[str, Any]:
    """The JSON object of one batch."""
    return {
        "v": batch.v,
        "source": batch.source,
        "epoch": batch.epoch,
        "seq": batch.seq,
        "ts": batch.ts,
        "events": [event_to_dict(e) for e in batch.events],
        "digest": batch.digest,
        "meta": batch.meta,
    }


def encode_batch(batch: EventBatch) -> bytes:
    """Serialise a batch to the bytes of one log record."""
    return orjson.dumps(batch_to_dict(batch))


# --- decoding -------------------------------------------------------------------------------


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _int64(value: object, where: str) -> int:
    if type(value) is not int:
        raise DecodeError(where, f"expected int64, got {_type_name(value)}")
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise DecodeError(where, f"{value} is outside int64")
    return value


def _optional_int64(value: object, where: str) -> int | None:
    return None if value is None else _int64(value, where)


def _non_negative_int(value: object, where: str) -> int:
    if type(value) is not int or value < 0:
        raise DecodeError(where, f"expected a non-negative int, got {value!r}")
    return value


def _string(value: object, where: str) -> str:
    if type(value) is not str:
        raise DecodeError(where, f"expected str, got {_type_name(value)}")
    return value


def _optional_string(value: object, where: str) -> str | None:
    return None if value is None else _string(value, where)


def _int_list(value: object, where: str, *, minimum: int, maximum: int) -> tuple[int, ...]:
    if type(value) is not list:
        raise DecodeError(where, f"expected a list, got {_type_name(value)}")
    # The checks run as C loops (type set, min, max); the per-item loop only runs to name
    # the first bad item once we know there is one.
    if value and (
        set(map(type, value)) != _ONLY_INT or min(value) < minimum or max(value) > maximum
    ):
        for index, item in enumerate(value):
            if type(item) is not int or not minimum <= item <= maximum:
                raise DecodeError(
                    f"{where}[{index}]", f"expected int in [{minimum}, {maximum}], got {item!r}"
                )
    return tuple(value)


def _hash_list(value: object, where: str) -> tuple[int, ...]:
    hashes = _int_list(value, where, minimum=_INT64_MIN, maximum=_INT64_MAX)
    if not hashes:
        raise DecodeError(where, "must hold at least one block hash")
    return hashes


def _exact_fields(raw: dict[str, Any], expected: frozenset[str], where: str) -> None:
    if raw.keys() != expected:
        missing = sorted(expected - raw.keys())
        extra = sorted(raw.keys() - expected)
        prefix = f"{where}." if where else ""
        if missing:
            raise DecodeError(f"{prefix}{missing[0]}", "missing")
        raise DecodeError(f"{prefix}{extra[0]}", "unknown field")


_STORED_FIELDS: Final = frozenset(
    {"type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium"}
)
_REMOVED_FIELDS: Final = frozenset({"type", "block_hashes", "medium"})
_RESIDENCY_FIELDS: Final = frozenset({"type", "block_hashes"})
_CLEARED_FIELDS: Final = frozenset({"type"})


# A frozen dataclass's __init__ sets each field through object.__setattr__, which dominates
# decoding one event per page; filling the slots through their descriptors gives the same state
# (the round-trip tests compare decoded events with constructed ones).
_new = object.__new__
_STORED_SLOTS: Final = (
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
)
if tuple(f.name for f in fields(BlockStored)) != _STORED_SLOTS:  # pragma: no cover - refactor guard
    raise ImportError("cache.events.codec is out of date with BlockStored's fields")
(
    _set_stored_hashes,
    _set_stored_parent,
    _set_stored_tokens,
    _set_stored_size,
    _set_stored_lora,
    _set_stored_medium,
) = (BlockStored.__dict__[name].__set__ for name in _STORED_SLOTS)


def _decode_stored(raw: dict[str, Any]) -> BlockStored:
    _exact_fields(raw, _STORED_FIELDS, "")
    block_size = raw["block_size"]
    if type(block_size) is not int or block_size <= 0:
        raise DecodeError("block_size", f"expected a positive int, got {block_size!r}")
    token_ids = _int_list(raw["token_ids"], "token_ids", minimum=0, maximum=0xFFFFFFFF)
    hashes = _hash_list(raw["block_hashes"], "block_hashes")
    if len(token_ids) != block_size * len(hashes):
        raise DecodeError(
            "token_ids",
            f"{len(token_ids)} tokens for {len(hashes)} block(s) of size {block_size}",
        )
    event: BlockStored = _new(BlockStored)
    _set_stored_hashes(event, hashes)
    _set_stored_parent(event, _optional_int64(raw["parent_block_hash"], "parent_block_hash"))
    _set_stored_tokens(event, token_ids)
    _set_stored_size(event, block_size)
    _set_stored_lora(event, _optional_int64(raw["lora_id"], "lora_id"))
    _set_stored_medium(event, _optional_string(raw["medium"], "medium"))
    return event


def _decode_removed(raw: dict[str, Any]) -> BlockRemoved:
    _exact_fields(raw, _REMOVED_FIELDS, "")
    return BlockRemoved(
        block_hashes=_hash_list(raw["block_hashes"], "block_hashes"),
        medium=_optional_string(raw["medium"], "medium"),
    )


def _decode_swa_evicted(raw: dict[str, Any]) -> BlockSWAEvicted:
    _exact_fields(raw, _RESIDENCY_FIELDS, "")
    return BlockSWAEvicted(_hash_list(raw["block_hashes"], "block_hashes"))


def _decode_swa_restored(raw: dict[str, Any]) -> BlockSWARestored:
    _exact_fields(raw, _RESIDENCY_FIELDS, "")
    return BlockSWARestored(_hash_list(raw["block_hashes"], "block_hashes"))


_ALL_CLEARED: Final = AllBlocksCleared()


def _decode_cleared(raw: dict[str, Any]) -> AllBlocksCleared:
    _exact_fields(raw, _CLEARED_FIELDS, "")
    return _ALL_CLEARED


_EVENT_DECODERS: Final[dict[str, Callable[[dict[str, Any]], Event]]] = {
    "BlockStored": _decode_stored,
    "BlockRemoved": _decode_removed,
    "BlockSWAEvicted": _decode_swa_evicted,
    "BlockSWARestored": _decode_swa_restored,
    "AllBlocksCleared": _decode_cleared,
}


def decode_event(raw: object, where: str = "event") -> Event:
    """Validate and build one event from its JSON object."""
    if type(raw) is not dict:
        raise DecodeError(where, f"expected an object, got {_type_name(raw)}")
    kind = raw.get("type")
    decoder = _EVENT_DECODERS.get(kind) if type(kind) is str else None
    if decoder is None:
        raise DecodeError(f"{where}.type", f"unknown event type {kind!r}")
    try:
        return decoder(raw)
    except DecodeError as exc:
        # Decoders name fields relative to the event; the path is only built on failure.
        raise DecodeError(f"{where}.{exc.field}" if exc.field else where, exc.reason) from None


def _decode_events(raw_events: list[Any]) -> tuple[Event, ...]:
    try:
        return tuple(map(decode_event, raw_events))
    except DecodeError as exc:
        index = _failed_index(raw_events)
        field = exc.field.removeprefix("event")
        raise DecodeError(f"events[{index}]{field}", exc.reason) from None


def _failed_index(raw_events: list[Any]) -> int:
    """The index of the first event that does not decode (only called after one failed)."""
    for index, raw in enumerate(raw_events):
        try:
            decode_event(raw)
        except DecodeError:
            return index
    raise AssertionError("an event failed to decode once but not twice")  # pragma: no cover


def decode_batch(data: bytes, *, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> EventBatch:
    """Validate and build a batch from the bytes of one log record."""
    if len(data) > max_record_bytes:
        raise DecodeError("", f"record of {len(data)} bytes exceeds the {max_record_bytes} limit")
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise DecodeError("", f"not JSON: {exc}") from None
    if type(raw) is not dict:
        raise DecodeError("", f"expected an object, got {_type_name(raw)}")
    version = raw.get("v")
    if version != BATCH_VERSION or type(version) is not int:
        raise DecodeError("v", f"unsupported batch version {version!r}")
    _exact_fields(raw, _BATCH_FIELDS, "")
    ts = raw["ts"]
    if type(ts) not in (int, float):
        raise DecodeError("ts", f"expected a number, got {_type_name(ts)}")
    raw_events = raw["events"]
    if type(raw_events) is not list:
        raise DecodeError("events", f"expected a list, got {_type_name(raw_events)}")
    meta = raw["meta"]
    if meta is not None and type(meta) is not dict:
        raise DecodeError("meta", f"expected an object or null, got {_type_name(meta)}")
    return EventBatch(
        source=_string(raw["source"], "source"),
        epoch=_string(raw["epoch"], "epoch"),
        seq=_non_negative_int(raw["seq"], "seq"),
        ts=float(ts),
        events=_decode_events(raw_events),
        digest=_optional_string(raw["digest"], "digest"),
        meta=meta,
        v=version,
    )
