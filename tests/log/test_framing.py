"""The file log's frame codec: each record's bytes, and every way a frame can fail its checks."""

from __future__ import annotations

import struct

import crc32c
import pytest

from log.file.framing import (
    BODY_HEADER,
    MAX_BODY_BYTES,
    FrameIncompleteError,
    FrameInvalidError,
    decode_frame,
    decode_frame_fields,
    encode_frame,
)


def _framed(body: bytes) -> bytes:
    return struct.pack("<II", len(body), crc32c.crc32c(body)) + body


def test_frames_round_trip_at_any_position() -> None:
    """Frames written one after another decode back to their fields, each from its start."""
    first = encode_frame(7, 1.5, b"src-a", b"payload")
    second = encode_frame(8, 2.5, "é".encode(), b"")
    buf = b"junk" + first + second
    frame = decode_frame(buf, 4, MAX_BODY_BYTES)
    fields = (frame.offset, frame.timestamp, frame.key, frame.payload)
    assert fields == (7, 1.5, "src-a", b"payload")
    assert decode_frame_fields(buf, frame.end_pos, MAX_BODY_BYTES) == (8, 2.5, "é", b"", len(buf))


@pytest.mark.parametrize("kept", [0, 3, 8, 20, -1])
def test_a_frame_cut_short_is_incomplete(kept: int) -> None:
    """A buffer ending anywhere inside a frame (header or body) reports it incomplete."""
    frame = encode_frame(1, 0.0, b"k", b"some payload")
    with pytest.raises(FrameIncompleteError):
        decode_frame_fields(frame[:kept], 0, MAX_BODY_BYTES)


@pytest.mark.parametrize("length", [0, BODY_HEADER.size - 1, 1000])
def test_a_bad_length_is_invalid_even_when_the_buffer_is_short(length: int) -> None:
    """A length outside the limits is damage, found from the 8-byte header alone."""
    header = struct.pack("<II", length, 0)
    for tail in (b"", bytes(30)):
        with pytest.raises(FrameInvalidError, match="frame length"):
            decode_frame_fields(header + tail, 0, 999)


def test_a_crc_mismatch_is_invalid() -> None:
    """One flipped payload byte fails the CRC."""
    frame = bytearray(encode_frame(1, 0.0, b"k", b"payload"))
    frame[-1] ^= 0x01
    with pytest.raises(FrameInvalidError, match="crc32c mismatch"):
        decode_frame_fields(bytes(frame), 0, MAX_BODY_BYTES)


def test_a_key_longer_than_its_frame_is_invalid() -> None:
    """A key length pointing past the frame's end is damage, even with a good CRC."""
    body = BODY_HEADER.pack(1, 0.0, 50) + b"short"
    with pytest.raises(FrameInvalidError, match="key length 50"):
        decode_frame_fields(_framed(body), 0, MAX_BODY_BYTES)


def test_a_key_that_is_not_utf8_is_invalid() -> None:
    """Key bytes that do not decode as UTF-8 are damage."""
    body = BODY_HEADER.pack(1, 0.0, 2) + b"\xff\xfe" + b"payload"
    with pytest.raises(FrameInvalidError, match="not UTF-8"):
        decode_frame_fields(_framed(body), 0, MAX_BODY_BYTES)
