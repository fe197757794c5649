"""The wire form of an ``EventBatch``: one JSON object per log record, coded by the native core.

``encode_batch`` writes the batch's version (2 by default: consecutive ``BlockStored`` events that
form a chain become one ``BlockStored`` listing every page, docs/design.md §4).
``decode_wire`` reads
version 1 and 2 records strictly into a ``WireBatch`` held natively (header attributes, events
made on first use); ``decode_batch`` gives the ``EventBatch``, one ``BlockStored`` per page. An
unknown version or event type, a missing, extra or mistyped field, a bad ``meta`` or an
oversized record raises ``DecodeError`` naming the field. Nothing is ever evaluated or
unpickled. ``tests.oracles.codec`` is the pure-Python twin that the differential tests
hold this equal to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from operator import attrgetter
from typing import Any, Final, get_origin, get_type_hints

import orjson

from cache.events import _native
from cache.events._native import WireBatch
from cache.events.errors import (
    DecodeError,
    EventRecorderError,
    ReplicaConsistencyError,
    ReplicaSnapshotError,
)
from cache.events.meta import BatchMeta
from cache.events.types import EVENT_TYPES, Event, EventBatch, late_fields

DEFAULT_MAX_RECORD_BYTES: Final[int] = _native.DEFAULT_MAX_RECORD_BYTES
"""The record size limit of ``decode_batch`` and ``decode_wire`` when none is given."""
SUPPORTED_VERSIONS: Final = tuple(_native.SUPPORTED_VERSIONS)
"""The wire versions the decoder reads."""

# The native core builds these types and raises these errors; it never imports this package.
_native.bind_classes(
    {
        cls.__name__: cls
        for cls in (
            *EVENT_TYPES,
            EventBatch,
            BatchMeta,
            DecodeError,
            EventRecorderError,
            ReplicaConsistencyError,
            ReplicaSnapshotError,
        )
    }
)

__all__ = [
    "DEFAULT_MAX_RECORD_BYTES",
    "SUPPORTED_VERSIONS",
    "DecodeError",
    "WireBatch",
    "batch_to_dict",
    "decode_batch",
    "decode_event",
    "decode_wire",
    "encode_batch",
    "event_to_dict",
]


# --- encoding -------------------------------------------------------------------------------


def encode_batch(batch: EventBatch) -> bytes:
    """Serialise a batch to the bytes of one log record (its version; 2: chains joined).

    ``ValueError`` names what in the batch would not decode again (a non-finite ``ts``, a store
    whose token count is not ``block_size`` per page, an event without block hashes, ...).
    """
    meta = batch.meta
    if meta is not None and not isinstance(meta, BatchMeta):
        raise TypeError(f"EventBatch.meta must be a BatchMeta or None, got {type(meta).__name__}")
    return _native.encode_batch(batch, None if meta is None else meta.to_json())


def _field_reader(names: tuple[str, ...]) -> Callable[[Event], tuple[Any, ...]]:
    """A function reading the fields ``names`` of an event as a tuple, in one C call where it
    can (``attrgetter`` of one name returns the bare value, of none is not allowed)."""
    if len(names) > 1:
        return attrgetter(*names)
    if not names:
        return lambda event: ()
    read_one = attrgetter(names[0])
    return lambda event: (read_one(event),)


def _to_dict_function(event_type: type[Event]) -> Callable[[Event], dict[str, Any]]:
    """``event_to_dict`` for ``event_type``, from its fields: ``type`` first, then each field in
    order, a tuple as a list; a field that a later wire version added (``ADDED_IN``) only when it
    is not None. The fields are read with one ``attrgetter`` call (this runs per event)."""
    hints = get_type_hints(event_type)
    late = late_fields(event_type)
    names = [f.name for f in fields(event_type)]
    early = tuple(name for name in names if name not in late)
    if names[: len(early)] != list(early):
        raise TypeError(f"{event_type.__name__}: a field added later comes before another")
    as_lists = tuple(name for name in early if get_origin(hints[name]) is tuple)
    later = tuple((name, get_origin(hints[name]) is tuple) for name in names if name in late)
    type_name = event_type.__name__
    read = _field_reader(early)

    def to_dict(event: Event) -> dict[str, Any]:
        out: dict[str, Any] = {"type": type_name}
        out.update(zip(early, read(event), strict=True))
        for name in as_lists:
            out[name] = list(out[name])
        for name, as_list in later:
            value = getattr(event, name)
            if value is not None:
                out[name] = list(value) if as_list else value
        return out

    return to_dict


_TO_DICT: Final = {event_type: _to_dict_function(event_type) for event_type in EVENT_TYPES}


def event_to_dict(event: Event) -> dict[str, Any]:
    """The JSON object of one event: its type's name, then its fields in order (a field that a
    later wire version added only when it is set)."""
    to_dict = _TO_DICT.get(type(event))
    if to_dict is None:
        to_dict = next(
            (f for event_type, f in _TO_DICT.items() if isinstance(event, event_type)), None
        )
        if to_dict is None:
            raise TypeError(f"not an event: {event!r}")
    return to_dict(event)


def batch_to_dict(batch: EventBatch) -> dict[str, Any]:
    """The JSON object of one batch, one object per event (a valid record of either version;
    ``encode_batch`` writes the compact form)."""
    return {
        "v": batch.v,
        "source": batch.source,
        "epoch": batch.epoch,
        "seq": batch.seq,
        "ts": batch.ts,
        "events": [event_to_dict(e) for e in batch.events],
        "digest": batch.digest,
        "meta": None if batch.meta is None else batch.meta.to_dict(),
    }


# --- decoding -------------------------------------------------------------------------------


def _checked_limit(max_record_bytes: int) -> int:
    if max_record_bytes < 0:
        raise ValueError(f"max_record_bytes must be non-negative, got {max_record_bytes}")
    return max_record_bytes


def decode_wire(data: bytes, *, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> WireBatch:
    """Validate one log record and hold it natively, without a Python object per event."""
    if type(data) is not bytes:
        data = bytes(data)
    if max_record_bytes < 0:
        _checked_limit(max_record_bytes)  # raises
    return _native.decode_wire(data, max_record_bytes)


def decode_batch(data: bytes, *, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> EventBatch:
    """Validate and build a batch from the bytes of one log record (one event per page)."""
    return decode_wire(data, max_record_bytes=max_record_bytes).to_batch()


def decode_event(raw: object, where: str = "event") -> Event:
    """Validate and build one event from its JSON object, as it is (a multi-page store stays
    one event); errors are named under ``where``."""
    try:
        data = orjson.dumps(raw)
    except orjson.JSONEncodeError as exc:
        raise DecodeError(where, f"not JSON: {exc}") from None
    return _native.decode_event(data, where)
