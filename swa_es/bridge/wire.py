"""The ZMQ framing shared by sglang's and vLLM's KV-event publishers.

Live messages are three frames: ``topic``, an 8-byte big-endian ``seq`` and the msgpack batch.
A replay request to the publisher's ROUTER socket is the 8-byte big-endian start seq (after the
empty delimiter frame a DEALER sends); the answer is one message per buffered batch, ``(seq,
payload)`` from sglang or ``(topic, seq, payload)`` from vLLM, ended by seq -1 with an empty
payload.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from cache.errors import SwaEsError

SEQ_BYTES: Final = 8
END_SEQ: Final = -1
END_SEQ_FRAME: Final = END_SEQ.to_bytes(SEQ_BYTES, "big", signed=True)


class FrameError(SwaEsError, ValueError):
    """A ZMQ message or msgpack batch that cannot be read; ``where`` names the part."""

    def __init__(self, where: str, reason: str) -> None:
        self.where = where
        self.reason = reason
        super().__init__(f"{where}: {reason}" if where else reason)


@dataclass(frozen=True, slots=True)
class Frame:
    """One engine batch as it came off a socket: its seq and still-encoded payload."""

    topic: bytes
    seq: int
    payload: bytes


def encode_seq(seq: int) -> bytes:
    """``seq`` as 8 big-endian bytes (-1 is the end-of-replay marker)."""
    return seq.to_bytes(SEQ_BYTES, "big", signed=seq < 0)


def decode_seq(frame: bytes, where: str = "seq") -> int:
    """The seq of an 8-byte frame; the all-ones frame is ``END_SEQ``."""
    if len(frame) != SEQ_BYTES:
        raise FrameError(where, f"expected {SEQ_BYTES} bytes, got {len(frame)}")
    if frame == END_SEQ_FRAME:
        return END_SEQ
    return int.from_bytes(frame, "big")


def parse_live(parts: list[bytes]) -> Frame:
    """A live PUB message: ``(topic, seq, payload)``."""
    if len(parts) != 3:
        raise FrameError("message", f"expected 3 frames (topic, seq, payload), got {len(parts)}")
    return Frame(parts[0], decode_seq(parts[1]), parts[2])


def parse_replay(parts: list[bytes]) -> Frame:
    """One replay answer as a DEALER receives it: ``("", seq, payload)`` (sglang) or
    ``("", topic, seq, payload)`` (vLLM); ``seq == END_SEQ`` ends the replay."""
    if parts and parts[0] == b"":
        parts = parts[1:]
    if len(parts) == 2:
        return Frame(b"", decode_seq(parts[0]), parts[1])
    if len(parts) == 3:
        return Frame(parts[0], decode_seq(parts[1]), parts[2])
    raise FrameError("replay", f"expected 2 or 3 frames after the delimiter, got {len(parts)}")
