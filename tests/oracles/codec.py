"""The batch codec: the pure-Python reference of the native core (``native/src/codec``).

A record is one JSON object (docs/design.md §4). Version 2 joins consecutive ``BlockStored`` events
that form a chain (each page's parent is the previous page; same ``block_size``, ``lora_id``,
``medium``; all with token ids or all without) into one ``BlockStored`` listing every page;
version 1 writes one object per event.
Version 3 is version 2 whose ``BlockRemoved`` may carry ``reason`` (``"evicted"`` or
``"demoted"``; absent means null). Decoding reads all three and yields one ``BlockStored`` per
page (a multi-page store of any version is split). It is strict: JSON syntax first (orjson),
then the checks below in this order, and the first that fails raises
``DecodeError(field, reason)``:

- the record: an object; ``v`` present, an int, 1, 2 or 3; no missing key (the first in sorted
  order is named), no unknown key; ``ts`` a number; ``events`` a list; ``meta`` an object or
  null; ``source`` and ``epoch`` strings; ``seq`` a non-negative int; each event in order;
  ``digest`` a string or null; the typed fields of ``meta`` (``tests.oracles.meta``);
- an event: an object; ``type`` present, a string, a known type; exactly its keys (its
  dataclass's fields; one that a later version added may be absent); then its fields in this
  order (``_FIELD_READERS``, by field name, whatever the type): ``block_size`` (a positive
  int), ``token_ids`` (ints in [0, 2**32)), ``block_hashes`` (int64s, at least one), the
  token count (once all three are read: ``block_size`` per block hash, or none at all, the
  writer having withheld them), ``parent_block_hash`` and ``lora_id`` (int64 or
  null), ``medium`` (a string or null), ``reason`` (one of ours or null; a non-null one in a
  batch below version 3 is named as the event's error, right after it).

Reasons show an int by its digits and any other value by its type name. The native decoder
gives the same error for every record, except the wording after ``not JSON`` for syntax errors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sized
from dataclasses import dataclass, fields, replace
from operator import attrgetter
from typing import Any, Final, get_origin, get_type_hints

import orjson

from cache.events.codec import event_to_dict  # a plain dict view, not codec logic: one copy
from cache.events.errors import DecodeError
from cache.events.meta import BatchMeta
from cache.events.types import EVENT_TYPES, BlockStored, Event, EventBatch, late_fields
from tests.oracles.meta import meta_from_dict

DEFAULT_MAX_RECORD_BYTES: Final = 16 * 1024 * 1024
SUPPORTED_VERSIONS: Final = (1, 2, 3)
_REASONS: Final = ("evicted", "demoted")
_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1
_UINT32_MAX: Final = 0xFFFFFFFF
_BATCH_FIELDS: Final = frozenset({"v", "source", "epoch", "seq", "ts", "events", "digest", "meta"})
_EXCERPT_CHARS: Final = 40


# --- encoding -------------------------------------------------------------------------------


def _joins(chain: dict[str, Any], event: BlockStored) -> bool:
    return bool(
        event.parent_block_hash == chain["block_hashes"][-1]
        and event.block_size == chain["block_size"]
        and event.lora_id == chain["lora_id"]
        and event.medium == chain["medium"]
        and bool(event.token_ids) == bool(chain["token_ids"])
    )


def compact_events(events: tuple[Event, ...]) -> list[dict[str, Any]]:
    """The JSON objects of ``events`` with every chain of ``BlockStored`` joined into one."""
    out: list[dict[str, Any]] = []
    chain: dict[str, Any] | None = None
    for event in events:
        if isinstance(event, BlockStored) and chain is not None and _joins(chain, event):
            chain["block_hashes"].extend(event.block_hashes)
            chain["token_ids"].extend(event.token_ids)
            continue
        raw = event_to_dict(event)
        chain = raw if isinstance(event, BlockStored) else None
        out.append(raw)
    return out


def _check_encodable(batch: EventBatch) -> None:
    if batch.meta is not None and not isinstance(batch.meta, BatchMeta):
        kind = type(batch.meta).__name__
        raise TypeError(f"EventBatch.meta must be a BatchMeta or None, got {kind}")
    if batch.v not in SUPPORTED_VERSIONS:
        raise ValueError(f"v: unsupported batch version {batch.v}")
    if not math.isfinite(batch.ts):
        raise ValueError(f"ts: {batch.ts} is not a finite number")
    for index, event in enumerate(batch.events):
        wire = _WIRE_TYPES[type(event)]
        if wire.pages_of is not None:
            tokens, hashes, size = wire.pages_of(event)
            if size <= 0:
                raise ValueError(f"events[{index}].block_size: expected a positive int, got {size}")
            if not _tokens_fit(tokens, hashes, size):
                raise ValueError(f"events[{index}].token_ids: {_pages_text(tokens, hashes, size)}")
        if wire.late and (too_early := _too_early(event, batch.v)):
            name, version = too_early
            raise ValueError(f"events[{index}].{name}: {_needs_version(name, version, batch.v)}")
        if wire.hashes_of is not None and not wire.hashes_of(event):
            raise ValueError(f"events[{index}].block_hashes: must hold at least one block hash")


def _too_early(event: Event, version: int) -> tuple[str, int] | None:
    """The first field of ``event`` set that a later wire version than ``version`` added, with
    that version."""
    for name, added in _WIRE_TYPES[type(event)].late.items():
        if version < added and getattr(event, name) is not None:
            return name, added
    return None


def _needs_version(name: str, added: int, version: int) -> str:
    return f"{_LATE_FIELD_NOUNS[name]} needs wire version {added}, the batch is version {version}"


def batch_to_dict(batch: EventBatch) -> dict[str, Any]:
    """The JSON object of one batch as its version writes it (2: chains joined)."""
    _check_encodable(batch)
    events = (
        compact_events(batch.events)
        if batch.v >= 2
        else [event_to_dict(event) for event in batch.events]
    )
    return {
        "v": batch.v,
        "source": batch.source,
        "epoch": batch.epoch,
        "seq": batch.seq,
        "ts": float(batch.ts),
        "events": events,
        "digest": batch.digest,
        "meta": None if batch.meta is None else batch.meta.to_dict(),
    }


def encode_batch(batch: EventBatch) -> bytes:
    """Serialise a batch to the bytes of one log record."""
    return orjson.dumps(batch_to_dict(batch))


def batch_to_v1_pages_dict(batch: EventBatch) -> dict[str, Any]:
    """The JSON object of ``batch`` as plain version 1: one object per event and one
    ``BlockStored`` per page (the form before wire compaction; benchmarks' yardstick)."""
    pages = tuple(
        page
        for event in batch.events
        for page in (split_pages(event) if isinstance(event, BlockStored) else (event,))
    )
    return batch_to_dict(replace(batch, v=1, events=pages))


# --- decoding -------------------------------------------------------------------------------


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _describe(value: object) -> str:
    return str(value) if type(value) is int else _type_name(value)


def _quoted_excerpt(text: str) -> str:
    if len(text) > _EXCERPT_CHARS:
        return orjson.dumps(text[:_EXCERPT_CHARS]).decode() + "..."
    return orjson.dumps(text).decode()


def _int64(value: object, where: str) -> int:
    if type(value) is not int:
        raise DecodeError(where, f"expected int64, got {_type_name(value)}")
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise DecodeError(where, f"{value} is outside int64")
    return value


def _optional_int64(value: object, where: str) -> int | None:
    return None if value is None else _int64(value, where)


def _string(value: object, where: str) -> str:
    if type(value) is not str:
        raise DecodeError(where, f"expected str, got {_type_name(value)}")
    return value


def _optional_string(value: object, where: str) -> str | None:
    return None if value is None else _string(value, where)


def _int_list(value: object, where: str, *, minimum: int, maximum: int) -> list[int]:
    if type(value) is not list:
        raise DecodeError(where, f"expected a list, got {_type_name(value)}")
    for index, item in enumerate(value):
        if type(item) is not int or not minimum <= item <= maximum:
            raise DecodeError(
                f"{where}[{index}]",
                f"expected int in [{minimum}, {maximum}], got {_describe(item)}",
            )
    return value


def _hash_list(value: object, where: str) -> list[int]:
    hashes = _int_list(value, where, minimum=_INT64_MIN, maximum=_INT64_MAX)
    if not hashes:
        raise DecodeError(where, "must hold at least one block hash")
    return hashes


def _exact_fields(
    raw: dict[str, Any], expected: frozenset[str], optional: frozenset[str] = frozenset()
) -> None:
    missing = sorted(expected - raw.keys())
    if missing:
        raise DecodeError(missing[0], "missing")
    unknown = sorted(raw.keys() - expected - optional)
    if unknown:
        raise DecodeError(unknown[0], "unknown field")


def _positive_int(value: object, where: str) -> int:
    if type(value) is not int or value <= 0:
        raise DecodeError(where, f"expected a positive int, got {_describe(value)}")
    return value


def _token_list(value: object, where: str) -> list[int]:
    return _int_list(value, where, minimum=0, maximum=_UINT32_MAX)


def _optional_reason(value: object, where: str) -> str | None:
    reason = _optional_string(value, where)
    if reason is not None and reason not in _REASONS:
        raise DecodeError(
            where, f'expected "evicted", "demoted" or null, got {_quoted_excerpt(reason)}'
        )
    return reason


_FIELD_READERS: Final[Mapping[str, Callable[[object, str], Any]]] = {
    "block_size": _positive_int,
    "token_ids": _token_list,
    "block_hashes": _hash_list,
    "parent_block_hash": _optional_int64,
    "lora_id": _optional_int64,
    "medium": _optional_string,
    "reason": _optional_reason,
}
"""How each event field is read, by name (a name means the same in every event type), in the
order the decoder checks an event's fields."""

_LATE_FIELD_NOUNS: Final[Mapping[str, str]] = {"reason": "a removal reason"}
"""What the error for a set field in a batch below the version that added it calls the field."""

_PAGES: Final = ("token_ids", "block_hashes", "block_size")
"""The fields of a store of pages: ``block_size`` tokens a block hash (``_pages_text``'s order)."""


def _tokens_fit(tokens: Sized, hashes: Sized, size: int) -> bool:
    """Whether ``tokens`` are ``size`` per block hash, or none (withheld by the writer)."""
    return len(tokens) in (0, size * len(hashes))


def _pages_text(tokens: Sized, hashes: Sized, size: int) -> str:
    """How ``tokens`` do not make ``size`` tokens per block hash."""
    return f"{len(tokens)} tokens for {len(hashes)} block(s) of size {size}"


@dataclass(frozen=True, slots=True)
class _WireType:
    """What the codec reads and checks of one event type, from its dataclass fields."""

    event_type: type[Event]
    expected: frozenset[str]  # the keys its object must have ("type" too)
    late: Mapping[str, int]  # the keys it may have: fields a later version added, with it
    optional: frozenset[str]  # late's keys
    readers: tuple[tuple[str, Callable[[object, str], Any], bool], ...]  # (name, read, tuple)
    pages_after: str | None  # the field after whose reading its pages are counted
    pages_of: Callable[[Event], tuple[tuple[int, ...], tuple[int, ...], int]] | None  # _PAGES
    hashes_of: Callable[[Event], tuple[int, ...]] | None

    @classmethod
    def of(cls, event_type: type[Event]) -> _WireType:
        hints = get_type_hints(event_type)
        names = [f.name for f in fields(event_type)]
        unread = sorted(set(names) - _FIELD_READERS.keys())
        if unread:
            raise TypeError(f"{event_type.__name__}: no reader for field {unread[0]!r}")
        late = late_fields(event_type)
        ordered = [name for name in _FIELD_READERS if name in names]
        has_pages = set(names).issuperset(_PAGES)
        return cls(
            event_type=event_type,
            expected=frozenset({"type", *names}) - late.keys(),
            late=late,
            optional=frozenset(late),
            readers=tuple(
                (name, _FIELD_READERS[name], get_origin(hints[name]) is tuple) for name in ordered
            ),
            pages_after=[name for name in ordered if name in _PAGES][-1] if has_pages else None,
            pages_of=attrgetter(*_PAGES) if has_pages else None,
            hashes_of=attrgetter("block_hashes") if "block_hashes" in names else None,
        )

    def decode(self, raw: dict[str, Any]) -> Event:
        """The event of ``raw``: exactly its keys, then each field in ``_FIELD_READERS`` order."""
        _exact_fields(raw, self.expected, self.optional)
        values: dict[str, Any] = {}
        for name, read, is_tuple in self.readers:
            value = read(raw.get(name), name)
            values[name] = tuple(value) if is_tuple else value
            if name == self.pages_after:
                tokens, hashes, size = (values[page] for page in _PAGES)
                if not _tokens_fit(tokens, hashes, size):
                    raise DecodeError("token_ids", _pages_text(tokens, hashes, size))
        return self.event_type(**values)


_WIRE_TYPES: Final = {event_type: _WireType.of(event_type) for event_type in EVENT_TYPES}
_EVENT_DECODERS: Final = {event_type.__name__: wire for event_type, wire in _WIRE_TYPES.items()}


def _decode_event_fields(raw: object) -> Event:
    if type(raw) is not dict:
        raise DecodeError("", f"expected an object, got {_type_name(raw)}")
    if "type" not in raw:
        raise DecodeError("type", "missing")
    kind = raw["type"]
    if type(kind) is not str:
        raise DecodeError("type", f"expected str, got {_type_name(kind)}")
    decoder = _EVENT_DECODERS.get(kind)
    if decoder is None:
        raise DecodeError("type", f"unknown event type {_quoted_excerpt(kind)}")
    return decoder.decode(raw)


def decode_event(raw: object, where: str = "event") -> Event:
    """Validate and build one event from its JSON object, as it is (a multi-page store stays
    whole); errors are named under ``where``."""
    try:
        return _decode_event_fields(raw)
    except DecodeError as exc:
        raise DecodeError(f"{where}.{exc.field}" if exc.field else where, exc.reason) from None


def split_pages(event: BlockStored) -> list[BlockStored]:
    """One ``BlockStored`` per page of a (possibly multi-page) store."""
    if len(event.block_hashes) == 1:
        return [event]
    size = event.block_size
    parents = (event.parent_block_hash, *event.block_hashes[:-1])
    return [
        BlockStored(
            (block_hash,),
            parent,
            event.token_ids[index * size : (index + 1) * size],
            size,
            event.lora_id,
            event.medium,
        )
        for index, (block_hash, parent) in enumerate(zip(event.block_hashes, parents, strict=True))
    ]


def _decode_events(raw_events: list[Any], version: int) -> tuple[Event, ...]:
    events: list[Event] = []
    for index, raw in enumerate(raw_events):
        event = decode_event(raw, f"events[{index}]")
        too_early = _too_early(event, version)
        if too_early:
            name, added = too_early
            raise DecodeError(f"events[{index}].{name}", _needs_version(name, added, version))
        if isinstance(event, BlockStored):
            events.extend(split_pages(event))
        else:
            events.append(event)
    return tuple(events)


def decode_batch(data: bytes, *, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> EventBatch:
    """Validate and build a batch from the bytes of one log record."""
    if max_record_bytes < 0:
        raise ValueError(f"max_record_bytes must be non-negative, got {max_record_bytes}")
    if len(data) > max_record_bytes:
        raise DecodeError("", f"record of {len(data)} bytes exceeds the {max_record_bytes} limit")
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise DecodeError("", f"not JSON: {exc}") from None
    if type(raw) is not dict:
        raise DecodeError("", f"expected an object, got {_type_name(raw)}")
    if "v" not in raw:
        raise DecodeError("v", "missing")
    version = raw["v"]
    if type(version) is not int:
        raise DecodeError("v", f"expected int, got {_type_name(version)}")
    if version not in SUPPORTED_VERSIONS:
        raise DecodeError("v", f"unsupported batch version {version}")
    _exact_fields(raw, _BATCH_FIELDS)
    ts = raw["ts"]
    if type(ts) not in (int, float):
        raise DecodeError("ts", f"expected a number, got {_type_name(ts)}")
    raw_events = raw["events"]
    if type(raw_events) is not list:
        raise DecodeError("events", f"expected a list, got {_type_name(raw_events)}")
    meta = raw["meta"]
    if meta is not None and type(meta) is not dict:
        raise DecodeError("meta", f"expected an object or null, got {_type_name(meta)}")
    source = _string(raw["source"], "source")
    epoch = _string(raw["epoch"], "epoch")
    seq = raw["seq"]
    if type(seq) is not int or seq < 0:
        raise DecodeError("seq", f"expected a non-negative int, got {_describe(seq)}")
    events = _decode_events(raw_events, version)
    digest = _optional_string(raw["digest"], "digest")
    return EventBatch(
        source=source,
        epoch=epoch,
        seq=seq,
        ts=float(ts),
        events=events,
        digest=digest,
        meta=None if meta is None else meta_from_dict(meta),
        v=version,
    )
