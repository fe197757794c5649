"""The binary snapshot form of replica trees: a JSON header and raw little-endian arrays each.

Layout: ``b"SWRS"``, u16 version, u32 tree count; then per tree a u32 header length, the
header (orjson), and the arrays the header sizes, in the order of ``ARRAY_CODES``. No pickle.
Loading a million blocks is a few array copies and one ``dict(zip(...))``.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from consumers.errors import ViewStateError

MAGIC: Final = b"SWRS"
VERSION: Final = 1
_PREAMBLE: Final = struct.Struct("<4sHI")
_LENGTH: Final = struct.Struct("<I")
# keys, slots, parents, flags, children, tokens, free
ARRAY_CODES: Final = ("q", "q", "q", "B", "I", "I", "q")
_HEADER_FIELDS: Final[dict[str, type | tuple[type, ...]]] = {
    "source": str,
    "block_size": (int, type(None)),
    "slots": int,
    "live": int,
    "free": int,
    "digest": int,
    "tombstones": int,
    "diverged": (str, type(None)),
    "meta": (dict, type(None)),
}


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """One tree's header and its arrays, as ``ReplicaTree.export_state`` gives them."""

    header: Mapping[str, Any]
    arrays: list[array[Any]]


def _little_endian(values: array[Any]) -> bytes:
    if sys.byteorder == "little":
        return values.tobytes()
    swapped = array(values.typecode, values)  # pragma: no cover - big-endian hosts only
    swapped.byteswap()  # pragma: no cover
    return swapped.tobytes()  # pragma: no cover


def encode_replica_states(states: Sequence[ReplicaState]) -> bytes:
    """The bytes of every tree state."""
    parts = [_PREAMBLE.pack(MAGIC, VERSION, len(states))]
    for state in states:
        header = orjson.dumps(dict(state.header))
        parts += [_LENGTH.pack(len(header)), header]
        parts += [_little_endian(values) for values in state.arrays]
    return b"".join(parts)


def _lengths(header: Mapping[str, Any]) -> list[int]:
    slots, live = header["slots"], header["live"]
    block_size = header["block_size"] or 0
    return [live, live, slots, slots, slots, slots * block_size, header["free"]]


class _Reader:
    def __init__(self, view: str, data: bytes) -> None:
        self.view = view
        self.data = memoryview(data)
        self.offset = 0

    def take(self, count: int, what: str) -> memoryview:
        end = self.offset + count
        if count < 0 or end > len(self.data):
            raise ViewStateError(self.view, f"truncated in {what} at byte {self.offset}")
        chunk = self.data[self.offset : end]
        self.offset = end
        return chunk


def _read_header(reader: _Reader) -> dict[str, Any]:
    (length,) = _LENGTH.unpack(reader.take(_LENGTH.size, "tree header length"))
    try:
        header = orjson.loads(bytes(reader.take(length, "tree header")))
    except orjson.JSONDecodeError as exc:
        raise ViewStateError(reader.view, f"tree header is not JSON: {exc}") from None
    if type(header) is not dict:
        raise ViewStateError(reader.view, "tree header is not an object")
    for key, kinds in _HEADER_FIELDS.items():
        if not isinstance(header.get(key), kinds) or isinstance(header.get(key), bool):
            raise ViewStateError(reader.view, f"tree header field {key!r} is missing or mistyped")
    if min(header["slots"], header["live"], header["free"]) < 0 or header["live"] > header["slots"]:
        raise ViewStateError(reader.view, f"tree header counts are inconsistent: {header}")
    return header


def _read_tree(reader: _Reader) -> ReplicaState:
    header = _read_header(reader)
    arrays: list[array[Any]] = []
    for code, count in zip(ARRAY_CODES, _lengths(header), strict=True):
        values = array(code)
        values.frombytes(reader.take(count * values.itemsize, f"{code} array"))
        if sys.byteorder != "little":  # pragma: no cover - big-endian hosts only
            values.byteswap()
        arrays.append(values)
    slots = arrays[1]
    if slots and (min(slots) < 0 or max(slots) >= header["slots"]):
        raise ViewStateError(reader.view, f"slot index out of range in {header['source']!r}")
    return ReplicaState(header, arrays)


def decode_replica_states(view: str, data: bytes) -> list[ReplicaState]:
    """Parse what ``encode_replica_states`` wrote; ``ViewStateError`` naming ``view`` otherwise."""
    reader = _Reader(view, data)
    magic, version, count = _PREAMBLE.unpack(reader.take(_PREAMBLE.size, "preamble"))
    if magic != MAGIC:
        raise ViewStateError(view, f"not a replica snapshot (magic {bytes(magic)!r})")
    if version != VERSION:
        raise ViewStateError(view, f"replica snapshot version {version}, expected {VERSION}")
    states = [_read_tree(reader) for _ in range(count)]
    if reader.offset != len(data):
        raise ViewStateError(view, f"{len(data) - reader.offset} trailing bytes")
    return states
