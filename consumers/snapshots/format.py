"""The bytes of one snapshot, shared by every store (a file, or the chunks of a Kafka snapshot)::

    b"SWAESNAP" | u32 version | u32 manifest length | u32 manifest crc32c | manifest (JSON)
    | view bytes, in manifest order | u32 crc32c of everything before it

The manifest holds the position (just after the last record the views include), the cursors,
the view names and sizes, the digest of every source, the generation, the creation time and the
identity of the log the position is of (``log``: ``{"id": ..., "created_at": ...}`` or null;
snapshots written before it was recorded lack the field and read as null; being optional, it
needs no new version, so older builds still read newer snapshots and the other way round). It
has its own checksum so a snapshot's position can be read without reading its views. Loading
verifies the whole checksum before parsing anything but the magic and version; every field of
the manifest is then checked, so any bad snapshot raises ``SnapshotError``.
"""

from __future__ import annotations

import io
import os
import re
import struct
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import crc32c
import orjson

from consumers.errors import SnapshotError
from consumers.snapshots.base import Snapshot, SnapshotInfo
from log import LogIdentity, Position

MAGIC: Final = b"SWAESNAP"
VERSION: Final = 1
_HEAD: Final = struct.Struct("<8sIII")
_CRC: Final = struct.Struct("<I")
_CHECK_CHUNK_BYTES: Final = 1 << 20
FILE_NAME: Final = re.compile(r"^snapshot-(\d{12})\.swasnap$")


def file_name(generation: int) -> str:
    """The file name of a directory store's snapshot of ``generation``."""
    return f"snapshot-{generation:012d}.swasnap"


def encode_snapshot(
    generation: int,
    position: Position,
    cursors: Any,
    views: Mapping[str, bytes],
    digests: Mapping[str, str | None] | None = None,
    log_identity: LogIdentity | None = None,
) -> bytes:
    """The whole snapshot as bytes (manifest, views, checksum)."""
    manifest = orjson.dumps(
        {
            "generation": generation,
            "created_at": time.time(),
            "position": orjson.loads(position.to_json()),
            "cursors": cursors,
            "views": [[name, len(blob)] for name, blob in views.items()],
            "digests": dict(digests or {}),
            "log": None if log_identity is None else log_identity.to_obj(),
        }
    )
    head = _HEAD.pack(MAGIC, VERSION, len(manifest), crc32c.crc32c(manifest))
    body = b"".join([head, manifest, *views.values()])
    return body + _CRC.pack(crc32c.crc32c(body))


def _check_head(where: str, head: bytes, available: int) -> int:
    """Check the fixed header; the manifest length (bounded by ``available`` bytes)."""
    magic, version, length, _ = _HEAD.unpack(head)
    if magic != MAGIC:
        raise SnapshotError(where, f"not a snapshot (magic {magic!r})")
    if version != VERSION:
        raise SnapshotError(where, f"snapshot version {version}, this build reads {VERSION}")
    if length > available:
        raise SnapshotError(where, f"manifest length {length} runs past the end")
    return int(length)


def _check_digests(where: str, digests: object) -> None:
    if type(digests) is not dict or not all(type(d) is str or d is None for d in digests.values()):
        raise SnapshotError(where, "manifest digests must map sources to strings or null")


def _parse_manifest(where: str, head: bytes, manifest: bytes) -> dict[str, Any]:
    """The manifest's JSON object, after its own checksum was verified and its fields checked."""
    manifest_crc = _HEAD.unpack(head)[3]
    if crc32c.crc32c(manifest) != manifest_crc:
        raise SnapshotError(where, "manifest checksum mismatch")
    try:
        raw = orjson.loads(manifest)
    except orjson.JSONDecodeError as exc:
        raise SnapshotError(where, f"manifest is not JSON: {exc}") from None
    if type(raw) is not dict or not {"generation", "created_at", "position", "views"} <= set(raw):
        raise SnapshotError(where, "manifest lacks required fields")
    generation, created_at = raw["generation"], raw["created_at"]
    if type(generation) is not int or generation < 0:
        raise SnapshotError(where, f"manifest generation {generation!r} is not an int >= 0")
    if type(created_at) not in (int, float):
        raise SnapshotError(where, f"manifest created_at {created_at!r} is not a number")
    views = raw["views"]
    if type(views) is not list or not all(
        type(entry) is list
        and len(entry) == 2
        and type(entry[0]) is str
        and type(entry[1]) is int
        and entry[1] >= 0
        for entry in views
    ):
        raise SnapshotError(where, "manifest views must be [name, size >= 0] pairs")
    if len({entry[0] for entry in views}) != len(views):
        raise SnapshotError(where, "manifest names a view twice")
    _check_digests(where, raw.get("digests", {}))
    _log_identity(where, raw)
    return raw


def _log_identity(where: str, raw: Mapping[str, Any]) -> LogIdentity | None:
    """The identity of the log a manifest's position is of (None: it records none)."""
    recorded = raw.get("log")
    if recorded is None:
        return None
    try:
        return LogIdentity.from_obj(recorded)
    except ValueError as exc:
        raise SnapshotError(where, f"manifest log: {exc}") from None


def _info(name: str, where: str, raw: Mapping[str, Any], size: int) -> SnapshotInfo:
    try:
        position = Position.from_json(orjson.dumps(raw["position"]))
    except (ValueError, TypeError) as exc:
        raise SnapshotError(where, f"bad position: {exc}") from None
    named = FILE_NAME.match(name)
    if named is not None and int(named.group(1)) != raw["generation"]:
        raise SnapshotError(
            where, f"manifest generation {raw['generation']} does not match the file name"
        )
    return SnapshotInfo(
        name,
        where,
        int(raw["generation"]),
        position,
        float(raw["created_at"]),
        size,
        dict(raw.get("digests", {})),
        _log_identity(where, raw),
    )


def decode_snapshot(data: bytes, name: str, where: str) -> Snapshot:
    """Check and parse a whole snapshot held in memory; ``SnapshotError`` when bad."""
    if len(data) < _HEAD.size + _CRC.size:
        raise SnapshotError(where, "truncated snapshot")
    head = data[: _HEAD.size]
    length = _check_head(where, head, len(data) - _HEAD.size - _CRC.size)
    body_size = len(data) - _CRC.size
    view = memoryview(data)
    (body_crc,) = _CRC.unpack(data[body_size:])
    if crc32c.crc32c(view[:body_size]) != body_crc:
        raise SnapshotError(where, "checksum mismatch")
    raw = _parse_manifest(where, head, data[_HEAD.size : _HEAD.size + length])
    if _HEAD.size + length + sum(size for _, size in raw["views"]) != body_size:
        raise SnapshotError(where, "view sizes do not add up to the snapshot size")
    views: dict[str, bytes] = {}
    at = _HEAD.size + length
    for view_name, size in raw["views"]:
        views[view_name] = data[at : at + size]
        at += size
    return Snapshot(_info(name, where, raw, len(data)), raw.get("cursors"), views)


def read_info(path: Path) -> SnapshotInfo:
    """The checked manifest of a snapshot file (blocking); ``SnapshotError`` when bad.

    Reads only the header and the manifest, whose own checksum is verified before it is parsed.
    """
    where = str(path)
    with path.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        head = handle.read(_HEAD.size)
        if len(head) < _HEAD.size:
            raise SnapshotError(where, "truncated header")
        length = _check_head(where, head, size - _HEAD.size - _CRC.size)
        manifest = handle.read(length)
    if len(manifest) != length:
        raise SnapshotError(where, "truncated manifest")
    return _info(path.name, where, _parse_manifest(where, head, manifest), size)


def _checksum_of(where: str, handle: io.BufferedReader, size: int) -> int:
    """crc32c of the file's first ``size`` bytes, read in chunks that are not kept."""
    handle.seek(0)
    buffer = bytearray(min(_CHECK_CHUNK_BYTES, size))
    chunk = memoryview(buffer)
    crc, remaining = 0, size
    while remaining:
        got = handle.readinto(chunk[: min(len(chunk), remaining)])
        if not got:
            raise SnapshotError(where, "truncated file")
        crc = crc32c.crc32c(chunk[:got], crc)
        remaining -= got
    return crc


def read_snapshot(path: Path) -> Snapshot:
    """Read and fully check a snapshot file (blocking); ``SnapshotError`` when bad.

    Only the magic and the version (which say how the rest is laid out) are read before the
    whole file's checksum is verified, in a first pass that keeps nothing; only then is the
    manifest parsed and each view read straight into its own bytes (one copy of the snapshot in
    memory). The second pass checksums what it keeps too, so nothing is returned unless the
    bytes returned are the bytes verified.
    """
    where = str(path)
    with path.open("rb") as handle:
        file_size = os.fstat(handle.fileno()).st_size
        head = handle.read(_HEAD.size)
        if len(head) < _HEAD.size or file_size < _HEAD.size + _CRC.size:
            raise SnapshotError(where, "truncated file")
        length = _check_head(where, head, file_size - _HEAD.size - _CRC.size)
        body_size = file_size - _CRC.size
        crc = _checksum_of(where, handle, body_size)
        (body_crc,) = _CRC.unpack(handle.read(_CRC.size))
        if crc != body_crc:
            raise SnapshotError(where, "checksum mismatch")
        handle.seek(_HEAD.size)
        manifest = handle.read(length)
        raw = _parse_manifest(where, head, manifest)
        if _HEAD.size + length + sum(size for _, size in raw["views"]) != body_size:
            raise SnapshotError(where, "view sizes do not add up to the file size")
        crc = crc32c.crc32c(manifest, crc32c.crc32c(head))
        views: dict[str, bytes] = {}
        for name, size in raw["views"]:
            blob = handle.read(size)
            crc = crc32c.crc32c(blob, crc)
            views[name] = blob
    if crc != body_crc:
        raise SnapshotError(where, "changed while it was read (checksum mismatch)")
    return Snapshot(_info(path.name, where, raw, file_size), raw.get("cursors"), views)
