"""The native codec equals its pure-Python reference: same bytes out, same batch or the same
``DecodeError`` (field and reason) back, on random batches, mutated records and a corpus."""

from __future__ import annotations

import dataclasses
import gc
import json
import re
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cache.events import (
    BATCH_VERSION,
    DIGEST_ALGORITHM,
    AllBlocksCleared,
    BatchMeta,
    BlockRemoved,
    BlockStored,
    BlockSWAEvicted,
    BlockSWARestored,
    DecodeError,
    EventBatch,
    WireBatch,
    decode_wire,
)
from cache.events import codec as native
from tests.cache.codec_strategies import BATCHES, INT64, JSON_VALUES, TEXT, store_chains
from tests.oracles import codec as reference

CORPUS = Path(__file__).resolve().parents[1] / "data" / "codec"

Outcome = tuple[Any, ...]


def outcome(module: Any, data: bytes, **options: int) -> Outcome:
    """What decoding ``data`` gives: the batch, or the error's field and reason (only the class
    of a JSON syntax error: the wording after ``not JSON`` is each parser's own)."""
    try:
        return ("ok", module.decode_batch(data, **options))
    except DecodeError as error:
        reason = "not JSON" if error.reason.startswith("not JSON") else error.reason
        return ("error", error.field, reason)


def assert_same(data: bytes, **options: int) -> Outcome:
    """Native and reference agree on ``data``; the common outcome."""
    expected = outcome(reference, data, **options)
    got = outcome(native, data, **options)
    # A meta may nest 1,000 levels deep (orjson's limit): comparing it recurses as deep.
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 5000))
    try:
        assert got == expected, data[:400]
    finally:
        sys.setrecursionlimit(limit)
    return expected


# --- valid batches ---------------------------------------------------------------------------


@given(BATCHES)
def test_encode_is_byte_identical_and_both_decode_it_back(batch: EventBatch) -> None:
    """Both encoders write the same bytes; both decoders give the batch back."""
    data = native.encode_batch(batch)
    assert data == reference.encode_batch(batch)
    assert assert_same(data) == ("ok", batch)


# A timestamp in the range of time.time() whose binary value lies exactly halfway between two
# shortest 17-digit texts: the last digit goes to the even one, as orjson writes it.
TIE_TIMESTAMPS = st.integers(1 << 30, 1 << 31).map(lambda whole: whole + 185 / 256)


@given(TIE_TIMESTAMPS | st.floats(1e9, 3e9) | st.floats(allow_nan=False, allow_infinity=False))
def test_timestamps_are_written_as_orjson_writes_them(ts: float) -> None:
    """Every finite ts, exact ties between two shortest texts included, has orjson's digits."""
    batch = EventBatch("w", "e", 1, ts, (AllBlocksCleared(),))
    assert native.encode_batch(batch) == reference.encode_batch(batch)


def test_a_timestamp_tie_goes_to_the_even_digit() -> None:
    """The ts that once made a record differ from the reference path's in its last digit."""
    batch = EventBatch("w", "e", 1, 1796401612.72265625, (AllBlocksCleared(),))
    assert b'"ts":1796401612.7226562,' in native.encode_batch(batch)


@given(st.lists(store_chains(), min_size=1, max_size=4))
def test_version_2_writes_one_store_per_chain(chains: list[list[BlockStored]]) -> None:
    """Every chain becomes one wire event (chains can also join each other); decoding gives
    one event per page back."""
    events = tuple(event for chain in chains for event in chain)
    batch = EventBatch("w", "e", 1, 0.0, events)
    raw = orjson.loads(native.encode_batch(batch))
    assert len(raw["events"]) <= len(chains)
    assert sum(len(event["block_hashes"]) for event in raw["events"]) == len(events)
    assert native.decode_batch(orjson.dumps(raw)).events == events


def test_a_version_1_multi_page_store_decodes_to_one_event_per_page() -> None:
    """vLLM's multi-block form in a v1 record is split into pages, as in v2."""
    store = BlockStored((5, 6, 7), 4, (1, 2, 3, 4, 5, 6), 2, None, "GPU")
    raw = native.batch_to_dict(EventBatch("w", "e", 1, 0.0, (store,), v=1))
    batch = native.decode_batch(orjson.dumps(raw))
    assert batch.events == (
        BlockStored((5,), 4, (1, 2), 2, None, "GPU"),
        BlockStored((6,), 5, (3, 4), 2, None, "GPU"),
        BlockStored((7,), 6, (5, 6), 2, None, "GPU"),
    )
    assert reference.decode_batch(orjson.dumps(raw)) == batch


def test_a_store_without_token_ids_is_kept_and_joins_only_stores_without() -> None:
    """A store whose writer withheld the token ids (none at all, a token-free source) is
    written and read alike by both codecs, one token-less event per page; a chain joins pages
    with ids or pages without, never both; a partial token list stays an error."""
    events = (
        AllBlocksCleared(),
        BlockStored((1,), None, (), 2),
        BlockStored((2,), 1, (), 2),
        BlockStored((3,), 2, (5, 6), 2),
        BlockStored((4,), 3, (), 2),
    )
    batch = EventBatch("w", "e", 0, 0.0, events, meta=BatchMeta(2, 4, token_ids=False))
    data = native.encode_batch(batch)
    assert data == reference.encode_batch(batch)
    raw = orjson.loads(data)
    assert [(e["block_hashes"], e["token_ids"]) for e in raw["events"][1:]] == [
        ([1, 2], []),
        ([3], [5, 6]),
        ([4], []),
    ]
    assert raw["meta"]["token_ids"] is False
    assert assert_same(data) == ("ok", batch)
    multi = BlockStored((5, 6, 7), 4, (), 2, None, "GPU")
    v1 = orjson.dumps(native.batch_to_dict(EventBatch("w", "e", 1, 0.0, (multi,), v=1)))
    assert assert_same(v1)[1].events == tuple(
        BlockStored((page,), parent, (), 2, None, "GPU")
        for page, parent in ((5, 4), (6, 5), (7, 6))
    )
    partial = data.replace(
        b'"block_hashes":[1,2],"parent_block_hash":null,"token_ids":[]',
        b'"block_hashes":[1,2],"parent_block_hash":null,"token_ids":[9,9]',
    )
    assert assert_same(partial) == (
        "error",
        "events[1].token_ids",
        "2 tokens for 2 block(s) of size 2",
    )


# --- mutated records -------------------------------------------------------------------------

NASTY = st.one_of(
    JSON_VALUES,
    st.sampled_from([-(1 << 63), (1 << 63) - 1, 1 << 63, (1 << 64) - 1, 1 << 32, -1, 0, 1]),
    st.sampled_from(["BlockStored", "BlockRemoved", "AllBlocksCleared", "GPU", "", "mix64-v1"]),
    st.just(1.0),
)
KEYS = (
    st.sampled_from(
        ["type", "block_hashes", "token_ids", "block_size", "medium", "lora_id", "meta", "v", "zz"]
    )
    | TEXT
)


def _containers(value: Any) -> list[Any]:
    """Every dict and list inside ``value`` (itself included)."""
    found = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found.append(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            found.append(item)
            stack.extend(item)
    return found


@st.composite
def mutated_records(draw: st.DrawFn) -> bytes:
    """A valid record with one to three random edits: a value replaced, a key or item
    deleted, a key or item added."""
    raw = orjson.loads(native.encode_batch(draw(BATCHES)))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        target = draw(st.sampled_from(_containers(raw)))
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if isinstance(target, dict):
            if action == "add" or not target:
                target[draw(KEYS)] = draw(NASTY)
            else:
                key = draw(st.sampled_from(sorted(target)))
                if action == "delete":
                    del target[key]
                else:
                    target[key] = draw(NASTY)
        elif action == "add" or not target:
            target.insert(draw(st.integers(0, len(target))), draw(NASTY))
        else:
            index = draw(st.integers(0, len(target) - 1))
            if action == "delete":
                del target[index]
            else:
                target[index] = draw(NASTY)
    return orjson.dumps(raw)


@settings(max_examples=400)
@given(mutated_records())
def test_mutated_records_give_the_same_outcome(data: bytes) -> None:
    """After random edits both decoders give the same batch or the same error."""
    assert_same(data)


LITERALS = st.sampled_from(
    [
        b"-0",
        b"1e400",
        b"-1e400",
        b"1e-400",
        b"18446744073709551615",
        b"18446744073709551616",
        b"9223372036854775808",
        b"-9223372036854775809",
        b"1" * 320,
        b"1.0",
        b"01",
        b"1.",
        b".5",
        b"+1",
        b"true",
        b"nul",
        b"NaN",
        b'"\\ud800"',
        b'"\\ud83d\\ude00"',
        b'"\\u0000"',
        b'"\xff"',
        b'"\xed\xa0\x80"',
        b'"a\tb"',
        b"[]",
        b"{}",
        b"[1,]",
        b'{"a":1,"a":2}',
        b"[" * 1030 + b"]" * 1030,
        b"\x0c1",
        b" \t\r\n1",
    ]
)


@st.composite
def spliced_records(draw: st.DrawFn) -> bytes:
    """A valid record with one literal's text replaced by a nasty literal, or a few bytes
    inserted, deleted or changed anywhere."""
    data = bytearray(native.encode_batch(draw(BATCHES)))
    if draw(st.booleans()):
        digits = [i for i in range(len(data)) if chr(data[i]).isdigit() or data[i] in b'"[{tnf']
        at = draw(st.sampled_from(digits))
        end = at + 1
        while end < len(data) and data[end] not in b",]}:":
            end += 1
        data[at:end] = draw(LITERALS)
        return bytes(data)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        at = draw(st.integers(0, len(data)))
        match draw(st.sampled_from(["insert", "delete", "change"])):
            case "insert":
                data[at:at] = draw(st.binary(min_size=1, max_size=3))
            case "delete":
                del data[at : at + draw(st.integers(1, 3))]
            case _:
                if at < len(data):
                    data[at] = draw(st.integers(0, 255))
    return bytes(data)


@settings(max_examples=400)
@given(spliced_records())
def test_spliced_bytes_give_the_same_outcome(data: bytes) -> None:
    """Byte-level damage and odd literals: the same batch, error or syntax refusal."""
    assert_same(data)


BOUNDARY_INTS = st.sampled_from(
    [
        -(1 << 64),
        -(1 << 63) - 1,
        -(1 << 63),
        -1,
        0,
        1 << 32,
        (1 << 32) - 1,
        (1 << 63) - 1,
        1 << 63,
        (1 << 64) - 1,
        1 << 64,
        10**19 - 1,
        10**19,
    ]
)


@given(
    st.sampled_from(["block_hashes", "token_ids"]),
    st.lists(BOUNDARY_INTS | INT64, min_size=1, max_size=4),
    st.sampled_from([b",", b" , ", b",\n"]),
)
def test_int_lists_at_the_boundaries(field: str, items: list[int], comma: bytes) -> None:
    """Items around the int64, uint32 and uint64 limits, however separated, read alike."""
    store = BlockStored((1,), None, (2,), 1)
    data = native.encode_batch(EventBatch("w", "e", 1, 0.0, (store,)))
    listed = comma.join(str(item).encode() for item in items)
    old = b'"block_hashes":[1]' if field == "block_hashes" else b'"token_ids":[2]'
    assert_same(data.replace(old, b'"' + field.encode() + b'":[' + listed + b"]"))


@given(st.binary(max_size=64))
def test_random_bytes_give_the_same_outcome(data: bytes) -> None:
    """Arbitrary bytes never crash either decoder and give the same outcome."""
    assert_same(data)


@given(BATCHES, st.integers(min_value=0, max_value=4096))
def test_the_size_limit_is_the_same(batch: EventBatch, limit: int) -> None:
    """A record over ``max_record_bytes`` is refused by both with the same reason."""
    assert_same(native.encode_batch(batch), max_record_bytes=limit)


def test_a_negative_size_limit_is_a_value_error() -> None:
    """A negative ``max_record_bytes`` is a bad argument, for both."""
    for module in (native, reference):
        with pytest.raises(ValueError, match="max_record_bytes"):
            module.decode_batch(b"{}", max_record_bytes=-1)


@st.composite
def raw_events(draw: st.DrawFn) -> Any:
    """One event object from a valid batch, maybe edited."""
    batch = draw(BATCHES.filter(lambda b: bool(b.events)))
    raw = draw(st.sampled_from(orjson.loads(native.encode_batch(batch))["events"]))
    if draw(st.booleans()):
        raw[draw(KEYS)] = draw(NASTY)
    return raw


@given(raw_events() | NASTY)
def test_decode_event_gives_the_same_outcome(raw: Any) -> None:
    """``decode_event`` of one JSON object: the same event (stores kept whole) or error."""
    results = []
    for module in (native, reference):
        try:
            results.append(("ok", module.decode_event(raw, "ev")))
        except DecodeError as error:
            results.append(("error", error.field, error.reason))
    assert results[0] == results[1]


# --- the corpus ------------------------------------------------------------------------------


def _corpus() -> list[Path]:
    return sorted(CORPUS.glob("*.bin"))


def test_the_corpus_is_there() -> None:
    """The corpus has its records and each has its expected outcome."""
    expected = json.loads((CORPUS / "expected.json").read_text())
    assert len(_corpus()) >= 40
    assert sorted(expected) == [path.name for path in _corpus()]


@pytest.mark.parametrize("path", _corpus(), ids=lambda path: path.stem)
def test_corpus_record(path: Path) -> None:
    """Each nasty record gives the expected outcome, the same from both decoders."""
    expected = json.loads((CORPUS / "expected.json").read_text())[path.name]
    result = assert_same(path.read_bytes())
    if expected == "ok":
        assert result[0] == "ok"
    else:
        assert result[0] == "error"
        assert [result[1], result[2]] == expected


# --- WireBatch ---------------------------------------------------------------------------------


def _opening_batch() -> EventBatch:
    return EventBatch(
        "worker-0",
        "e1",
        0,
        12.5,
        (
            AllBlocksCleared(),
            BlockStored((11,), None, (1, 2), 2, None, "GPU"),
            BlockStored((12,), 11, (3, 4), 2, None, "GPU"),
        ),
        "00000000000000ff",
        BatchMeta(2, 4, digest_alg=DIGEST_ALGORITHM, extra={"note": [1, {"x": None}]}),
    )


def test_wire_batch_holds_the_header_and_makes_events_on_demand() -> None:
    """Header attributes, counts and the typed meta without events; events made once."""
    batch = _opening_batch()
    wire = decode_wire(native.encode_batch(batch))
    assert isinstance(wire, WireBatch)
    header = (wire.source, wire.epoch, wire.seq, wire.ts, wire.digest, wire.v)
    assert header == ("worker-0", "e1", 0, 12.5, "00000000000000ff", BATCH_VERSION)
    assert wire.meta == batch.meta and isinstance(wire.meta, BatchMeta)
    assert wire.starts_epoch and wire.event_count == len(wire) == 3
    assert wire.events is wire.events
    assert wire.events == batch.events
    assert wire.to_batch() == batch


def _every_kind_of_event() -> EventBatch:
    """A batch with each event type; the stores chain, so version 2 writes them as one."""
    return EventBatch(
        "worker-0",
        "e1",
        3,
        1.0,
        (
            BlockStored((21,), None, (5,), 1, None, "GPU"),
            BlockStored((22,), 21, (6,), 1, None, "GPU"),
            BlockStored((23,), 22, (7,), 1, 3, None),
            BlockRemoved((23, 24), "GPU"),
            BlockSWAEvicted((22,)),
            BlockSWARestored((22, 25)),
            AllBlocksCleared(),
        ),
    )


def test_events_made_natively_are_whole_instances_of_their_classes() -> None:
    """Events the core builds are exact instances with every field, equal, hashable,
    still frozen, and their int tuples are out of the cycle collector's sight."""
    batch = _every_kind_of_event()
    events = native.decode_batch(native.encode_batch(batch)).events
    assert events == batch.events
    assert [type(event) for event in events] == [type(event) for event in batch.events]
    assert {hash(event) for event in events} == {hash(event) for event in batch.events}
    for made, expected in zip(events, batch.events, strict=True):
        assert repr(made) == repr(expected)
        assert dataclasses.astuple(made) == dataclasses.astuple(expected)
        if isinstance(made, BlockStored | BlockRemoved):
            assert not gc.is_tracked(made.block_hashes)
    assert gc.is_tracked(events[0])
    with pytest.raises(dataclasses.FrozenInstanceError):
        events[0].block_size = 2  # type: ignore[misc]


def test_events_made_natively_hold_and_release_their_references() -> None:
    """Making and dropping many events leaves the objects they share as referenced as before."""
    data = native.encode_batch(_every_kind_of_event())
    shared = (None, AllBlocksCleared(), BlockStored, BlockRemoved)
    gc.collect()
    before = [sys.getrefcount(thing) for thing in shared]
    for _ in range(2000):
        events = native.decode_batch(data).events
        del events
    gc.collect()
    assert [sys.getrefcount(thing) for thing in shared] == before


def test_wire_batch_of_a_later_batch() -> None:
    """No meta, not an epoch start."""
    wire = decode_wire(native.encode_batch(EventBatch("w", "e", 5, 1.0, (AllBlocksCleared(),))))
    assert wire.meta is None and not wire.starts_epoch and wire.digest is None
    assert "seq=5" in repr(wire)


def test_decode_errors_come_from_the_native_decoder_as_decode_error() -> None:
    """The typed error crosses the boundary with its field and reason."""
    with pytest.raises(DecodeError) as info:
        decode_wire(b'{"v":9}')
    assert (info.value.field, info.value.reason) == ("v", "unsupported batch version 9")


def test_bytes_like_input_is_accepted() -> None:
    """bytearray and memoryview decode like bytes."""
    data = native.encode_batch(_opening_batch())
    assert native.decode_batch(bytearray(data)) == native.decode_batch(memoryview(data))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"ts": float("nan")}, "ts"),
        ({"events": (BlockStored((1,), None, (1, 2, 3), 2),)}, "events[0].token_ids"),
        ({"events": (BlockStored((1, 2), None, (1, 2), 2),)}, "events[0].token_ids"),
        ({"events": (BlockStored((), None, (), 2),)}, "events[0].block_hashes"),
        ({"v": 7}, "v"),
    ],
)
def test_both_encoders_refuse_what_would_not_decode(change: dict[str, Any], field: str) -> None:
    """A batch that would not decode again is a ValueError naming the field."""
    base = _opening_batch()
    values = {name: getattr(base, name) for name in base.__dataclass_fields__}
    batch = EventBatch(**(values | change))
    for module in (native, reference):
        with pytest.raises(ValueError, match=f"^{re.escape(field)}: "):
            module.encode_batch(batch)


@pytest.mark.parametrize("thing", ["BlockStored", 1, None])
def test_something_that_is_not_an_event_is_refused(thing: object) -> None:
    """Something that is not an event in ``events`` is a ValueError naming its index."""
    batch = EventBatch("w", "e", 0, 0.0, (AllBlocksCleared(), thing))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^events\[1\]: not an event"):
        native.encode_batch(batch)


def test_a_meta_that_is_not_a_batch_meta_is_a_type_error() -> None:
    """A plain dict as meta is refused loudly by both encoders."""
    batch = EventBatch("w", "e", 0, 0.0, (), meta={"page_size": 1})  # type: ignore[arg-type]
    for module in (native, reference):
        with pytest.raises(TypeError, match="BatchMeta"):
            module.encode_batch(batch)
