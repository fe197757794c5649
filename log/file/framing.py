"""On-disk record framing of the file log.

Every record is one frame, all integers little-endian::

    frame := u32 length | u32 crc32c(body) | body            (length = len(body))
    body  := u64 offset | f64 timestamp_s | u16 key_length | key (UTF-8) | payload

The CRC is CRC-32C (Castagnoli) from the ``crc32c`` package. Carrying the offset inside the
body lets recovery and readers check that records follow each other without gaps, and lets
recovery find the next good frame after a damaged one.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

from cache.errors import SwaEsError

FRAME_HEADER = struct.Struct("<II")
BODY_HEADER = struct.Struct("<QdH")
OFFSET_FIELD = struct.Struct("<Q")
HEADERS = struct.Struct("<IIQdH")
"""The frame header and the body header that follows it, read in one unpack: (length, crc,
offset, timestamp_s, key_length)."""
MIN_BODY_BYTES = BODY_HEADER.size
MAX_KEY_BYTES = 0xFFFF
MAX_BODY_BYTES = 2**32 - 1
"""The largest body a frame can describe; decoding uses it whatever ``max_record_bytes`` is, so
a smaller limit on a later open never makes older records look damaged."""


class FrameIncompleteError(SwaEsError):
    """The buffer ends inside the frame: more bytes may still arrive (or a torn write)."""


class FrameInvalidError(SwaEsError):
    """The frame is complete but fails a check; ``reason`` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Frame:
    """One decoded frame and the buffer position just past it."""

    offset: int
    timestamp: float
    key: str
    payload: bytes
    end_pos: int


def encode_frame(offset: int, timestamp: float, key: bytes, payload: bytes) -> bytes:
    """The framed bytes of one record (``key`` already UTF-8 encoded)."""
    body = BODY_HEADER.pack(offset, timestamp, len(key)) + key + payload
    return FRAME_HEADER.pack(len(body), crc32c.crc32c(body)) + body


def frame_bytes(key: bytes, payload: bytes) -> int:
    """How many bytes the frame of this key and payload takes on disk."""
    return FRAME_HEADER.size + BODY_HEADER.size + len(key) + len(payload)


def decode_frame(buf: bytes, pos: int, max_body_bytes: int) -> Frame:
    """Decode the frame at ``pos`` of ``buf``.

    Raises ``FrameIncompleteError`` when ``buf`` ends before the frame does and
    ``FrameInvalidError`` when the length, CRC or key fails its check.
    """
    return Frame(*decode_frame_fields(buf, pos, max_body_bytes))


_FRAME_HEADER_BYTES = FRAME_HEADER.size
_BODY_HEADER_BYTES = BODY_HEADER.size
_unpack_frame_header = FRAME_HEADER.unpack_from
_unpack_headers = HEADERS.unpack_from
_HEADERS_BYTES = HEADERS.size
_crc32c = crc32c.crc32c


def decode_frame_fields(
    buf: bytes, pos: int, max_body_bytes: int
) -> tuple[int, float, str, bytes, int]:
    """``decode_frame`` as a plain tuple ``(offset, timestamp, key, payload, end_pos)``, with
    the same checks and errors: the reader's per-record path, which makes no ``Frame``."""
    size = len(buf)
    if pos + _HEADERS_BYTES > size:
        # Too short for both headers: a valid length would make the frame end past the buffer.
        if pos + _FRAME_HEADER_BYTES <= size:
            length = _unpack_frame_header(buf, pos)[0]
            if length < MIN_BODY_BYTES or length > max_body_bytes:
                raise _length_error(length, max_body_bytes)
        raise FrameIncompleteError()
    length, crc, offset, timestamp, key_length = _unpack_headers(buf, pos)
    if length < MIN_BODY_BYTES or length > max_body_bytes:
        raise _length_error(length, max_body_bytes)
    end = pos + _FRAME_HEADER_BYTES + length
    if end > size:
        raise FrameIncompleteError()
    body = buf[pos + _FRAME_HEADER_BYTES : end]
    actual = _crc32c(body)
    if actual != crc:
        raise FrameInvalidError(f"crc32c mismatch (stored {crc:#010x}, computed {actual:#010x})")
    key_end = _BODY_HEADER_BYTES + key_length
    if key_end > length:
        raise FrameInvalidError(f"key length {key_length} exceeds the frame")
    try:
        key = str(body[_BODY_HEADER_BYTES:key_end], "utf-8")
    except UnicodeDecodeError as exc:
        raise FrameInvalidError(f"key is not UTF-8: {exc}") from None
    return offset, timestamp, key, body[key_end:], end


def _length_error(length: int, max_body_bytes: int) -> FrameInvalidError:
    return FrameInvalidError(f"frame length {length} outside [{MIN_BODY_BYTES}, {max_body_bytes}]")


def find_frame(buf: bytes, after_pos: int, offset: int, max_body_bytes: int) -> int | None:
    """The position of a valid frame carrying ``offset`` that starts after ``after_pos``, if any.

    Used by recovery to tell a damaged record in the middle (a good one follows) from a torn
    tail (nothing good follows).
    """
    needle = OFFSET_FIELD.pack(offset)
    search_from = after_pos + FRAME_HEADER.size + 1
    while True:
        hit = buf.find(needle, search_from)
        if hit < 0:
            return None
        start = hit - FRAME_HEADER.size
        try:
            frame = decode_frame(buf, start, max_body_bytes)
        except (FrameIncompleteError, FrameInvalidError):
            frame = None
        if frame is not None and frame.offset == offset:
            return start
        search_from = hit + 1


def next_good_frame(
    buf: bytes, pos: int, expected: int, max_body_bytes: int, lookahead: int = 16
) -> tuple[int, int] | None:
    """(position, offset) of the first valid frame after damage at ``pos`` that carries one of
    the ``lookahead`` offsets after ``expected``, if there is one."""
    for offset in range(expected + 1, expected + 1 + lookahead):
        found = find_frame(buf, pos, offset, max_body_bytes)
        if found is not None:
            return found, offset
    return None
