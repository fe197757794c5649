"""Fuzzing ``cache.events.decode_batch``: any bytes give an ``EventBatch`` or a ``DecodeError``
naming the field, never another exception.

Three sources of input: the corpus in ``tests/data/fuzz/decode`` (each case pins the exact
field path a reader must report, so a reimplementation of the decoder is held to the same
paths), arbitrary bytes, and valid batches with one mutation at a known place, whose error must
point into the part that was mutated. The size limit is configurable and checked before
anything is parsed.
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cache.events import DecodeError, EventBatch, decode_batch, encode_batch
from tests.fuzz.corpus import corpus_files

INT64 = st.integers(-(2**63), 2**63 - 1)
JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def stored(draw: st.DrawFn) -> dict[str, Any]:
    """A valid (possibly multi-page) BlockStored."""
    pages, size = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    return {
        "type": "BlockStored",
        "block_hashes": draw(st.lists(INT64, min_size=pages, max_size=pages)),
        "parent_block_hash": draw(st.none() | INT64),
        "token_ids": draw(
            st.lists(st.integers(0, 2**32 - 1), min_size=pages * size, max_size=pages * size)
        ),
        "block_size": size,
        "lora_id": draw(st.none() | INT64),
        "medium": draw(st.sampled_from(["GPU", "CPU", None])),
    }


HASHES = st.lists(INT64, min_size=1, max_size=4)
POSITIVE = st.integers(1, 2**20)
META = st.fixed_dictionaries(
    {"page_size": POSITIVE, "sliding_window_size": POSITIVE},
    optional={
        "digest_alg": st.none() | st.text(max_size=8),
        "swa_events": st.booleans(),
        "device": st.none() | st.text(max_size=6),
        "producer": st.none() | st.text(max_size=6),
        "digest_every_batches": st.none() | POSITIVE,
        "extra_note": JSON_SCALARS,
    },
)
EVENTS = st.one_of(
    stored(),
    st.fixed_dictionaries(
        {"type": st.just("BlockRemoved"), "block_hashes": HASHES, "medium": st.just("GPU")}
    ),
    st.fixed_dictionaries({"type": st.just("BlockSWAEvicted"), "block_hashes": HASHES}),
    st.fixed_dictionaries({"type": st.just("BlockSWARestored"), "block_hashes": HASHES}),
    st.just({"type": "AllBlocksCleared"}),
)
BATCHES = st.fixed_dictionaries(
    {
        "v": st.just(1),
        "source": st.text(max_size=10),
        "epoch": st.text(max_size=10),
        "seq": st.integers(0, 2**40),
        "ts": st.floats(0, 2e9),
        "events": st.lists(EVENTS, max_size=5),
        "digest": st.none() | st.text(max_size=16),
        "meta": st.none() | META,
    }
)


def _dumps(value: object) -> bytes:
    """JSON bytes of ``value``; the stdlib writes integers of any size (orjson refuses)."""
    return json.dumps(value).encode()


def decode_or_error(data: bytes, **limits: int) -> EventBatch | DecodeError:
    """The decoded batch or the DecodeError; any other exception fails the test."""
    try:
        return decode_batch(data, **limits)
    except DecodeError as error:
        assert isinstance(error.field, str) and isinstance(error.reason, str)
        assert error.reason and str(error)
        return error


@pytest.mark.parametrize("path", corpus_files("decode"), ids=lambda p: p.stem)
def test_decode_corpus(path: Path) -> None:
    """Each corpus input decodes, or fails naming exactly the field the case pins."""
    case = orjson.loads(path.read_bytes())
    outcome = decode_or_error(bytes.fromhex(case["input_hex"]))
    if case["field"] is None:
        assert isinstance(outcome, EventBatch)
    else:
        assert isinstance(outcome, DecodeError), outcome
        assert outcome.field == case["field"], str(outcome)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=512))
def test_arbitrary_bytes(data: bytes) -> None:
    """Any bytes: a batch or a DecodeError."""
    decode_or_error(data)


@settings(max_examples=200, deadline=None)
@given(value=JSON_VALUES)
def test_arbitrary_json(value: object) -> None:
    """Any JSON document: a batch or a DecodeError."""
    decode_or_error(_dumps(value))


@settings(max_examples=200, deadline=None)
@given(batch=BATCHES)
def test_valid_batches_round_trip(batch: dict[str, Any]) -> None:
    """Valid batches decode, and re-encoding the result decodes to the same batch."""
    decoded = decode_or_error(_dumps(batch))
    assert isinstance(decoded, EventBatch), decoded
    assert decode_batch(encode_batch(decoded)) == decoded


def _paths(value: Any, here: str = "") -> list[tuple[str, Any]]:
    """Every (path, value) inside a batch, in the decoder's path syntax."""
    found: list[tuple[str, Any]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{here}.{key}" if here else key
            found.append((path, item))
            found += _paths(item, path)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            path = f"{here}[{index}]"
            found.append((path, item))
            found += _paths(item, path)
    return found


def _set(document: Any, path: str, value: Any, *, drop: bool) -> None:
    tokens = path.replace("[", ".[").split(".")
    parent = document
    for token in tokens[:-1]:
        parent = parent[int(token[1:-1])] if token.startswith("[") else parent[token]
    last = tokens[-1]
    key: Any = int(last[1:-1]) if last.startswith("[") else last
    if drop:
        del parent[key]
    else:
        parent[key] = value


def _blame_scope(path: str) -> str:
    """The part of the batch an error must point into when ``path`` was mutated: the event for
    anything inside an event (a changed block_size makes token_ids wrong, say), else the
    top-level field."""
    if path.startswith("events["):
        return path[: path.index("]") + 1]
    return path.split(".")[0].split("[")[0]


@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(batch=BATCHES, data=st.data())
def test_one_mutation_is_blamed_on_its_place(batch: dict[str, Any], data: st.DataObject) -> None:
    """Replace, drop or add one field of a valid batch: it still decodes, or the DecodeError
    names a field inside the part that was changed."""
    paths = _paths(batch)
    mutated = json.loads(_dumps(batch))  # a copy without shared sub-objects
    action = data.draw(st.sampled_from(["replace", "drop", "add"]))
    if action == "add":
        containers = [""] + [p for p, v in paths if isinstance(v, dict) and p.startswith("events[")]
        where = data.draw(st.sampled_from(containers))
        name = data.draw(st.sampled_from(["extra", "x", "Type", "block_hash"]))
        target = mutated if not where else None
        if target is None:
            target = mutated
            for token in where.replace("[", ".[").split("."):
                target = target[int(token[1:-1])] if token.startswith("[") else target[token]
        target[name] = data.draw(JSON_VALUES)
        scope = _blame_scope(f"{where}.{name}" if where else name)
    else:
        path, _ = data.draw(st.sampled_from(paths))
        _set(mutated, path, data.draw(JSON_VALUES), drop=action == "drop")
        scope = _blame_scope(path)
    outcome = decode_or_error(_dumps(mutated))
    if isinstance(outcome, DecodeError):
        assert outcome.field.startswith(scope) or outcome.field == "", (scope, str(outcome))
        if outcome.field == "":
            assert scope == "v" or "version" in outcome.reason or "object" in outcome.reason
    else:
        assert decode_batch(encode_batch(outcome)) == outcome


@pytest.mark.parametrize("limit", [1, 100, 4096])
def test_the_size_limit_is_configurable_and_checked_before_parsing(limit: int) -> None:
    """A record over ``max_record_bytes`` is refused before it is parsed (it may be anything),
    and the same bytes decode under a larger limit."""
    meta = {"page_size": 1, "sliding_window_size": 1, "pad": "x" * limit}
    data = orjson.dumps({**_valid(), "meta": meta})
    refused = decode_or_error(data, max_record_bytes=limit)
    assert isinstance(refused, DecodeError) and refused.field == ""
    assert str(limit) in refused.reason
    assert isinstance(decode_or_error(data, max_record_bytes=len(data)), EventBatch)
    garbage = b"\xff" * (limit + 1)
    assert str(limit) in decode_or_error(garbage, max_record_bytes=limit).reason  # type: ignore[union-attr]


def test_an_oversized_record_is_refused_in_bounded_memory() -> None:
    """32 MiB of input against the default 16 MiB limit: refused without building anything."""
    data = b"[" * (32 * 1024 * 1024)
    tracemalloc.start()
    try:
        outcome = decode_or_error(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(outcome, DecodeError) and "limit" in outcome.reason
    assert peak < 1024 * 1024


def _valid() -> dict[str, Any]:
    return {
        "v": 1,
        "source": "s",
        "epoch": "e",
        "seq": 0,
        "ts": 0.0,
        "events": [{"type": "AllBlocksCleared"}],
        "digest": None,
        "meta": None,
    }
