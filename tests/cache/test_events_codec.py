"""Round trips and strict rejections of the event batch codec.

Every rejection runs against the native codec (``cache.events``) and its pure-Python reference,
and both must name the same field with the same reason."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cache.events import (
    REMOVAL_REASONS,
    REMOVED_DEMOTED,
    AllBlocksCleared,
    BatchMeta,
    BlockRemoved,
    BlockStored,
    BlockSWAEvicted,
    BlockSWARestored,
    DecodeError,
    EventBatch,
    batch_to_dict,
    decode_batch,
    encode_batch,
)
from cache.events import codec as native_codec
from tests.oracles import codec as reference_codec

INT64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
TOKEN = st.integers(min_value=0, max_value=0xFFFFFFFF)


@st.composite
def stored_events(draw: st.DrawFn) -> BlockStored:
    size = draw(st.integers(min_value=1, max_value=16))
    return BlockStored(
        block_hashes=(draw(INT64),),
        parent_block_hash=draw(st.none() | INT64),
        token_ids=tuple(draw(st.lists(TOKEN, min_size=size, max_size=size))),
        block_size=size,
        lora_id=draw(st.none() | INT64),
        medium=draw(st.none() | st.just("GPU")),
    )


HASHES = st.lists(INT64, min_size=1, max_size=8).map(tuple)
EVENTS = st.one_of(
    stored_events(),
    HASHES.map(BlockRemoved),
    HASHES.map(BlockSWAEvicted),
    HASHES.map(BlockSWARestored),
    st.just(AllBlocksCleared()),
)
BATCHES = st.builds(
    EventBatch,
    source=st.text(max_size=20),
    epoch=st.text(max_size=32),
    seq=st.integers(min_value=0, max_value=1 << 62),
    ts=st.floats(allow_nan=False, allow_infinity=False),
    events=st.lists(EVENTS, max_size=20).map(tuple),
    digest=st.none() | st.text(max_size=16),
    meta=st.none() | st.just(BatchMeta(16, 256)),
    v=st.sampled_from([1, 2]),
)


def _good_batch() -> dict[str, Any]:
    batch = EventBatch(
        source="worker-0",
        epoch="e1",
        seq=3,
        ts=12.5,
        events=(
            AllBlocksCleared(),
            BlockStored((7470307888890966271,), None, (1,), 1),
            BlockStored((-1634645291211865391,), 7470307888890966271, (2,), 1),
            BlockSWAEvicted((7470307888890966271,)),
            BlockSWARestored((7470307888890966271,)),
            BlockRemoved((7470307888890966271, -1634645291211865391)),
        ),
        digest="00000000000000ff",
        meta=BatchMeta(1, 4),
    )
    return batch_to_dict(batch)


def _encode(raw: object) -> bytes:
    return orjson.dumps(raw)


def _decode_error(data: bytes, **options: int) -> DecodeError:
    """The error of decoding ``data``, the same from the native codec and the reference."""
    errors = []
    for codec in (native_codec, reference_codec):
        with pytest.raises(DecodeError) as info:
            codec.decode_batch(data, **options)
        errors.append(info.value)
    native, reference = errors
    assert native.field == reference.field
    if not reference.reason.startswith("not JSON"):
        assert native.reason == reference.reason
    return native


@given(BATCHES)
def test_round_trip_preserves_every_batch(batch: EventBatch) -> None:
    """Any valid batch decodes back to an equal batch."""
    assert decode_batch(encode_batch(batch)) == batch


def test_wire_form_uses_sglang_field_names() -> None:
    """A BlockStored event carries the field names sglang and vLLM consumers read."""
    stored = _good_batch()["events"][1]
    assert set(stored) == {
        "type",
        "block_hashes",
        "parent_block_hash",
        "token_ids",
        "block_size",
        "lora_id",
        "medium",
    }


@pytest.mark.parametrize(
    ("path", "bad_value", "field"),
    [
        (("v",), 4, "v"),
        (("v",), 2.0, "v"),
        (("v",), "1", "v"),
        (("source",), 5, "source"),
        (("epoch",), None, "epoch"),
        (("seq",), -1, "seq"),
        (("seq",), 1.5, "seq"),
        (("seq",), True, "seq"),
        (("ts",), "now", "ts"),
        (("events",), {}, "events"),
        (("digest",), 5, "digest"),
        (("meta",), [], "meta"),
        (("meta", "page_size"), 0, "meta.page_size"),
        (("meta", "sliding_window_size"), None, "meta.sliding_window_size"),
        (("meta", "digest_alg"), 1, "meta.digest_alg"),
        (("meta", "swa_events"), "yes", "meta.swa_events"),
        (("events", 0), "AllBlocksCleared", "events[0]"),
        (("events", 1, "type"), "BlockMoved", "events[1].type"),
        (("events", 1, "block_hashes"), 5, "events[1].block_hashes"),
        (("events", 1, "block_hashes"), [], "events[1].block_hashes"),
        (("events", 1, "block_hashes", 0), "x", "events[1].block_hashes[0]"),
        (("events", 1, "parent_block_hash"), "x", "events[1].parent_block_hash"),
        (("events", 1, "token_ids", 0), -1, "events[1].token_ids[0]"),
        (("events", 1, "token_ids", 0), 1 << 32, "events[1].token_ids[0]"),
        (("events", 1, "token_ids"), [1, 2], "events[1].token_ids"),
        (("events", 1, "block_size"), 0, "events[1].block_size"),
        (("events", 1, "block_size"), "1", "events[1].block_size"),
        (("events", 1, "lora_id"), "a", "events[1].lora_id"),
        (("events", 1, "medium"), 3, "events[1].medium"),
        (("events", 3, "block_hashes", 0), 1.0, "events[3].block_hashes[0]"),
        (("events", 4, "block_hashes"), None, "events[4].block_hashes"),
        (("events", 5, "medium"), [], "events[5].medium"),
    ],
)
def test_every_wrong_field_type_is_rejected_by_name(
    path: tuple[str | int, ...], bad_value: object, field: str
) -> None:
    """A mistyped field raises DecodeError naming exactly that field."""
    raw: Any = _good_batch()
    target = raw
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = bad_value
    assert _decode_error(_encode(raw)).field == field


@pytest.mark.parametrize("where", ["batch", "event"])
def test_missing_and_unknown_fields_are_rejected(where: str) -> None:
    """A missing field or an extra one is named in the error."""
    raw: Any = _good_batch()
    target = raw if where == "batch" else raw["events"][1]
    prefix = "" if where == "batch" else "events[1]."
    target["surprise"] = 1
    error = _decode_error(_encode(raw))
    assert (error.field, error.reason) == (f"{prefix}surprise", "unknown field")
    del target["surprise"]
    missing = "digest" if where == "batch" else "token_ids"
    del target[missing]
    error = _decode_error(_encode(raw))
    assert (error.field, error.reason) == (f"{prefix}{missing}", "missing")


def test_out_of_range_int64_is_rejected() -> None:
    """A block hash outside int64 is rejected, even though JSON can carry it."""
    raw = _encode(_good_batch()).replace(b"7470307888890966271", b"17470307888890966271", 1)
    assert _decode_error(raw).field == "events[1].block_hashes[0]"


@pytest.mark.parametrize("payload", [b"", b"not json", b"[1,2]", b'"batch"', b"\xff\xfe"])
def test_garbage_is_rejected(payload: bytes) -> None:
    """Bytes that are not a JSON object raise DecodeError, never anything else."""
    assert _decode_error(payload).field == ""


def test_oversized_record_is_rejected_before_parsing() -> None:
    """A record larger than the bound is refused with its size in the message."""
    huge = _encode(_good_batch()) + b" " * 2048
    error = _decode_error(huge, max_record_bytes=1024)
    assert error.reason == f"record of {len(huge)} bytes exceeds the 1024 limit"
    default_bound = 16 * 1024 * 1024
    assert "exceeds" in _decode_error(b" " * (default_bound + 1)).reason


def test_events_are_frozen() -> None:
    """Events are immutable plain data."""
    event = BlockRemoved((1,))
    with pytest.raises(AttributeError):
        event.block_hashes = (2,)  # type: ignore[misc]  # assigning a frozen field on purpose


REMOVALS_WITH_REASONS = st.builds(
    BlockRemoved,
    HASHES,
    st.none() | st.sampled_from(["GPU", "CPU", "STORAGE", "CPU_PINNED"]),
    st.none() | st.sampled_from(sorted(REMOVAL_REASONS)),
)


@given(BATCHES.map(lambda batch: replace(batch, v=3)), st.lists(REMOVALS_WITH_REASONS, max_size=4))
def test_version_3_carries_removal_reasons_both_codecs_alike(
    batch: EventBatch, removals: list[BlockRemoved]
) -> None:
    """A version 3 batch keeps each removal's tier and reason, in the native and the reference
    codec alike, byte for byte."""
    batch = replace(batch, events=(*batch.events, *removals))
    data = encode_batch(batch)
    assert data == reference_codec.encode_batch(batch)
    assert decode_batch(data) == batch == reference_codec.decode_batch(data)


@pytest.mark.parametrize("version", [1, 2])
def test_a_removal_reason_needs_version_3(version: int) -> None:
    """Older versions cannot say why: the encoder refuses, and so does the decoder."""
    batch = EventBatch("w", "e", 0, 1.0, (BlockRemoved((5,), "CPU", REMOVED_DEMOTED),), v=version)
    with pytest.raises(ValueError, match=r"events\[0\]\.reason: .*needs wire version 3"):
        encode_batch(batch)
    raw = batch_to_dict(replace(batch, v=3))
    raw["v"] = version
    error = _decode_error(_encode(raw))
    assert (error.field, "version 3" in error.reason) == ("events[0].reason", True)


@pytest.mark.parametrize("reason", ["lost", 1, ["evicted"]])
def test_an_unknown_removal_reason_is_named(reason: object) -> None:
    """A reason that is not one of ours is refused by name, in both codecs."""
    raw = _good_batch()
    raw["v"] = 3
    raw["events"][-1]["reason"] = reason
    assert _decode_error(_encode(raw)).field == f"events[{len(raw['events']) - 1}].reason"


def test_the_reference_codec_knows_the_native_wire_constants() -> None:
    """The twin's versions and record limit are the native core's (the only definition the
    product uses)."""
    assert reference_codec.SUPPORTED_VERSIONS == native_codec.SUPPORTED_VERSIONS
    assert reference_codec.DEFAULT_MAX_RECORD_BYTES == native_codec.DEFAULT_MAX_RECORD_BYTES
