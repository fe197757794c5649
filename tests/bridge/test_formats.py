"""Decoding engine batches: every accepted form, unknown fields and types, clear errors."""

from __future__ import annotations

import msgpack
import pytest

from swa_es.bridge.formats import (
    EngineCleared,
    EngineRemoved,
    EngineStored,
    WireFormat,
    decode_batch,
)
from swa_es.bridge.sequencer import StreamTracker, Verdict
from swa_es.bridge.wire import FrameError


def pack(value: object) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def test_array_and_map_events_decode_alike() -> None:
    """sglang 0.5.16 arrays, the metadata-map variant and tagged maps give the same events."""
    arrays = pack(
        [
            1.5,
            [
                ["AllBlocksCleared"],
                ["BlockStored", [11], None, [1, 2], 2, None, "GPU"],
                ["BlockStored", [12], 11, [3, 4], 2, None, "GPU", {"cache_salt": "s"}],
                ["BlockRemoved", [12], "GPU"],
            ],
            0,
        ]
    )
    batch = decode_batch(arrays, WireFormat.SGLANG)
    assert isinstance(batch.events[0], EngineCleared)
    assert batch.events[1] == EngineStored((11,), None, (1, 2), 2, "GPU")
    assert isinstance(batch.events[2], EngineStored) and batch.events[2].namespace == "s"
    assert batch.events[3] == EngineRemoved((12,), "GPU")
    maps = pack(
        [
            2.0,
            [
                {
                    "type": "BlockStored",
                    "block_hashes": [b"\x01" * 32],
                    "parent_block_hash": None,
                    "token_ids": [5, 6],
                    "block_size": 2,
                    "lora_id": None,
                    "medium": "GPU",
                    "lora_name": "ad",
                    "session_id": "x",
                    "brand_new_field": 1,
                },
                {"type": "SomethingNew", "x": 1},
            ],
        ]
    )
    batch = decode_batch(maps, WireFormat.AUTO)
    assert batch.unknown_types == ("SomethingNew",)
    stored = batch.events[0]
    assert isinstance(stored, EngineStored) and stored.namespace == "ad"
    assert stored.block_hashes == (b"\x01" * 32,)


@pytest.mark.parametrize(
    ("payload", "where"),
    [
        (b"\xc1", ""),
        (pack({"nope": 1}), "batch.ts"),
        (pack([1.0, "x"]), "batch.events"),
        (pack([1.0, [["BlockStored", [1], None, [[1, 2]], 1, None]]]), "events[0].token_ids[0]"),
        (pack([1.0, [["BlockStored", [1], None, [1, 2, 3], 2, None]]]), "events[0].token_ids"),
        (pack([1.0, [{"type": 3}]]), "events[0].type"),
        (pack([1.0, [["BlockRemoved", "x"]]]), "events[0].block_hashes"),
    ],
)
def test_bad_batches_name_the_part(payload: bytes, where: str) -> None:
    """What does not fit raises FrameError naming where."""
    with pytest.raises(FrameError) as caught:
        decode_batch(payload)
    assert caught.value.where == where


def test_tracker_tells_duplicates_from_restarts() -> None:
    """A seq seen again with its payload is a duplicate; with another payload, a restart."""
    tracker = StreamTracker()
    assert tracker.classify(0, b"a") is Verdict.FIRST
    tracker.accept(0, b"a")
    tracker.accept(1, b"b")
    assert tracker.classify(2, b"c") is Verdict.NEXT
    assert tracker.classify(5, b"c") is Verdict.GAP
    assert tracker.classify(1, b"b") is Verdict.DUPLICATE
    assert tracker.classify(1, b"other") is Verdict.RESTART
