"""How a snapshot is laid out as records of a compacted topic: chunks, then a manifest.

Keys (``<snap>`` is ``<generation:012d>-<writer>``, the writer a random id per store instance,
so writers sharing a group never write the same key)::

    <group>/<snap>/chunk/<index:06d>   b"SWAECHNK" | u32 crc32c(data) | data
    <group>/<snap>/manifest            b"SWAEMANI" | u32 crc32c(json) | json

The chunks, concatenated, are the snapshot's bytes (``consumers.snapshots.format``). The
manifest names the chunks (count, each one's size and checksum), the checksum of the whole,
the log position covered, the digest of every source and the identity of the log (``log``,
optional: manifests written before it was recorded have none). A snapshot is complete once its
manifest is on the topic: chunks are acknowledged before the manifest is sent.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Any, Final

import crc32c
import orjson

from cache.errors import SwaEsError
from log import LogIdentity, Position

CHUNK_MAGIC: Final = b"SWAECHNK"
MANIFEST_MAGIC: Final = b"SWAEMANI"
MANIFEST_FORMAT: Final = 1
_HEAD: Final = struct.Struct("<8sI")
HEADER_BYTES: Final = _HEAD.size
GROUP: Final = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
_KEY: Final = re.compile(
    r"^(?P<snap>(?P<gen>\d{12})-[0-9a-f]{1,32})/(?:manifest|chunk/(?P<i>\d{6}))$"
)


class ChunkError(SwaEsError, ValueError):
    """A chunk or manifest record that does not check out (``reason`` says why)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def snap_id(generation: int, writer: str) -> str:
    """The key part naming one snapshot."""
    return f"{generation:012d}-{writer}"


def chunk_key(group: str, snap: str, index: int) -> str:
    """The key of chunk ``index`` of snapshot ``snap``."""
    return f"{group}/{snap}/chunk/{index:06d}"


def manifest_key(group: str, snap: str) -> str:
    """The key of the manifest of snapshot ``snap``."""
    return f"{group}/{snap}/manifest"


@dataclass(frozen=True, slots=True)
class ParsedKey:
    """What a key of the group names: a snapshot, its generation, and a chunk index (None: the
    manifest)."""

    snap: str
    generation: int
    chunk: int | None


def parse_key(group: str, key: str) -> ParsedKey | None:
    """The parts of a key of ``group`` (None: not a snapshot key of it)."""
    prefix = f"{group}/"
    if not key.startswith(prefix):
        return None
    match = _KEY.match(key[len(prefix) :])
    if match is None:
        return None
    index = match.group("i")
    return ParsedKey(
        match.group("snap"), int(match.group("gen")), None if index is None else int(index)
    )


def encode_chunk(data: bytes) -> bytes:
    """One chunk record's value."""
    return _HEAD.pack(CHUNK_MAGIC, crc32c.crc32c(data)) + data


def decode_chunk(value: bytes) -> bytes:
    """The data of a chunk record, checked; ``ChunkError`` when it does not check out."""
    if len(value) < _HEAD.size:
        raise ChunkError("truncated chunk")
    magic, crc = _HEAD.unpack_from(value)
    if magic != CHUNK_MAGIC:
        raise ChunkError(f"not a chunk (magic {magic!r})")
    data = value[_HEAD.size :]
    if crc32c.crc32c(data) != crc:
        raise ChunkError("chunk checksum mismatch")
    return data


@dataclass(frozen=True, slots=True)
class Manifest:
    """A snapshot's manifest: what it covers and which chunks hold it."""

    snap: str
    generation: int
    writer: str
    created_at: float
    position: Position
    digests: dict[str, str | None]
    chunk_sizes: tuple[int, ...]
    chunk_crcs: tuple[int, ...]
    size_bytes: int
    crc: int
    stored_bytes: int
    log_identity: LogIdentity | None = None

    def to_value(self) -> bytes:
        """The manifest record's value."""
        body = orjson.dumps(
            {
                "format": MANIFEST_FORMAT,
                "snap": self.snap,
                "generation": self.generation,
                "writer": self.writer,
                "created_at": self.created_at,
                "position": orjson.loads(self.position.to_json()),
                "digests": self.digests,
                "chunks": [
                    list(pair) for pair in zip(self.chunk_sizes, self.chunk_crcs, strict=True)
                ],
                "size_bytes": self.size_bytes,
                "crc": self.crc,
                "stored_bytes": self.stored_bytes,
                "log": None if self.log_identity is None else self.log_identity.to_obj(),
            }
        )
        return _HEAD.pack(MANIFEST_MAGIC, crc32c.crc32c(body)) + body

    @classmethod
    def from_value(cls, value: bytes) -> Manifest:
        """Parse and check a manifest record's value; ``ChunkError`` when it does not check out."""
        if len(value) < _HEAD.size:
            raise ChunkError("truncated manifest")
        magic, crc = _HEAD.unpack_from(value)
        if magic != MANIFEST_MAGIC:
            raise ChunkError(f"not a manifest (magic {magic!r})")
        body = value[_HEAD.size :]
        if crc32c.crc32c(body) != crc:
            raise ChunkError("manifest checksum mismatch")
        try:
            raw = orjson.loads(body)
            return cls._from_obj(raw)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ChunkError(f"bad manifest: {exc}") from None

    @classmethod
    def _from_obj(cls, raw: Any) -> Manifest:
        if raw["format"] != MANIFEST_FORMAT:
            raise ValueError(f"manifest format {raw['format']}, this build reads {MANIFEST_FORMAT}")
        chunks = raw["chunks"]
        if type(chunks) is not list or not all(
            type(c) is list and len(c) == 2 and all(type(x) is int and x >= 0 for x in c)
            for c in chunks
        ):
            raise ValueError("chunks must be [size, crc] pairs")
        digests = raw["digests"]
        if type(digests) is not dict or not all(
            type(d) is str or d is None for d in digests.values()
        ):
            raise ValueError("digests must map sources to strings or null")
        for name in ("generation", "size_bytes", "crc", "stored_bytes"):
            if type(raw[name]) is not int or raw[name] < 0:
                raise ValueError(f"{name} must be an int >= 0")
        if type(raw["snap"]) is not str or type(raw["writer"]) is not str:
            raise ValueError("snap and writer must be strings")
        if type(raw["created_at"]) not in (int, float):
            raise ValueError("created_at must be a number")
        recorded = raw.get("log")
        return cls(
            raw["snap"],
            raw["generation"],
            raw["writer"],
            float(raw["created_at"]),
            Position.from_json(orjson.dumps(raw["position"])),
            dict(digests),
            tuple(c[0] for c in chunks),
            tuple(c[1] for c in chunks),
            raw["size_bytes"],
            raw["crc"],
            raw["stored_bytes"],
            None if recorded is None else LogIdentity.from_obj(recorded),
        )


def split(data: bytes, chunk_bytes: int) -> list[bytes]:
    """``data`` cut into pieces of at most ``chunk_bytes`` (one empty piece for empty data)."""
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be positive, got {chunk_bytes}")
    return [data[at : at + chunk_bytes] for at in range(0, len(data), chunk_bytes)] or [b""]
