"""The record layout of a snapshot on a compacted topic (no broker needed)."""

from __future__ import annotations

import dataclasses

import pytest

from consumers.snapshots.chunks import (
    ChunkError,
    Manifest,
    chunk_key,
    decode_chunk,
    encode_chunk,
    manifest_key,
    parse_key,
    snap_id,
    split,
)
from log import Position


def test_keys_name_group_generation_writer_and_chunk() -> None:
    """A key of the group parses back; other groups' keys and stray keys do not."""
    snap = snap_id(7, "ab12cd34")
    parsed = parse_key("g", chunk_key("g", snap, 3))
    assert parsed is not None
    assert (parsed.snap, parsed.generation, parsed.chunk) == (snap, 7, 3)
    manifest = parse_key("g", manifest_key("g", snap))
    assert manifest is not None
    assert manifest.chunk is None
    assert parse_key("other", chunk_key("g", snap, 3)) is None
    assert parse_key("g", "g/not-a-snapshot") is None
    assert parse_key("g-x", chunk_key("g", snap, 3)) is None


def test_a_chunk_round_trips_and_any_damage_is_refused() -> None:
    """A chunk's checksum covers its bytes; its magic says what it is."""
    value = encode_chunk(b"some bytes")
    assert decode_chunk(value) == b"some bytes"
    for at in range(len(value)):
        damaged = bytearray(value)
        damaged[at] ^= 0x01
        with pytest.raises(ChunkError):
            decode_chunk(bytes(damaged))
    with pytest.raises(ChunkError, match="truncated"):
        decode_chunk(value[:5])


def test_a_manifest_round_trips_and_damage_is_refused() -> None:
    """Every field comes back; a flipped byte or a foreign format is a ChunkError."""
    manifest = Manifest(
        snap_id(3, "ff"),
        3,
        "ff",
        12.5,
        Position.of({0: 10, 2: 4}),
        {"w": "abc", "x": None},
        (4, 0),
        (1, 2),
        4,
        9,
        123,
    )
    assert Manifest.from_value(manifest.to_value()) == manifest
    damaged = bytearray(manifest.to_value())
    damaged[-3] ^= 0x20
    with pytest.raises(ChunkError, match="checksum"):
        Manifest.from_value(bytes(damaged))
    with pytest.raises(ChunkError, match="not a manifest"):
        Manifest.from_value(encode_chunk(b"{}"))
    negative = dataclasses.replace(manifest, size_bytes=-1)
    with pytest.raises(ChunkError, match="size_bytes"):
        Manifest.from_value(negative.to_value())


def test_split_cuts_within_the_limit_and_keeps_every_byte() -> None:
    """Pieces are at most chunk_bytes long and join back to the data; empty data is one piece."""
    data = bytes(range(256)) * 10
    pieces = split(data, 300)
    assert all(len(piece) <= 300 for piece in pieces)
    assert b"".join(pieces) == data
    assert split(b"", 10) == [b""]
    with pytest.raises(ValueError, match="positive"):
        split(data, 0)
