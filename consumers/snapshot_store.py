"""Durable snapshots of a follower: every view, the cursors, and the log position they cover.

One file per snapshot, ``snapshot-<generation>.swasnap``::

    b"SWAESNAP" | u32 version | u32 manifest length | u32 manifest crc32c | manifest (JSON)
    | view bytes, in manifest order | u32 crc32c of everything before it

The manifest holds the position (just after the last record the views include), the cursors,
the view names and sizes, the generation and the creation time. The manifest has its own
checksum so a snapshot's position can be read without reading its views. Loading verifies the
whole file's checksum before parsing anything but the magic and version; every field of the
manifest is then checked, so any bad file raises ``SnapshotError``. Files are written
tmp -> fsync -> rename -> fsync(dir) (a failed write leaves no partial file behind); a corrupt
or foreign-version file is skipped with a warning and never loaded. Only the newest ``keep``
files are kept.
"""

from __future__ import annotations

import io
import logging
import os
import re
import struct
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.to_thread
import crc32c
import orjson

from consumers.errors import SnapshotError
from log import Position
from log.directories import create_data_directory

logger = logging.getLogger(__name__)

MAGIC: Final = b"SWAESNAP"
VERSION: Final = 1
_HEAD: Final = struct.Struct("<8sIII")
_CRC: Final = struct.Struct("<I")
_CHECK_CHUNK_BYTES: Final = 1 << 20
_NAME: Final = re.compile(r"^snapshot-(\d{12})\.swasnap$")


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """Where a snapshot file is and what it covers (from its checked manifest)."""

    path: Path
    generation: int
    position: Position
    created_at: float
    size_bytes: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A loaded, checked snapshot."""

    info: SnapshotInfo
    cursors: Any
    views: dict[str, bytes]


def _file_name(generation: int) -> str:
    return f"snapshot-{generation:012d}.swasnap"


def _encode(generation: int, position: Position, cursors: Any, views: Mapping[str, bytes]) -> bytes:
    manifest = orjson.dumps(
        {
            "generation": generation,
            "created_at": time.time(),
            "position": orjson.loads(position.to_json()),
            "cursors": cursors,
            "views": [[name, len(blob)] for name, blob in views.items()],
        }
    )
    head = _HEAD.pack(MAGIC, VERSION, len(manifest), crc32c.crc32c(manifest))
    body = b"".join([head, manifest, *views.values()])
    return body + _CRC.pack(crc32c.crc32c(body))


def _check_head(path: Path, head: bytes, available: int) -> int:
    """Check the fixed header; the manifest length (bounded by ``available`` bytes)."""
    magic, version, length, _ = _HEAD.unpack(head)
    if magic != MAGIC:
        raise SnapshotError(str(path), f"not a snapshot (magic {magic!r})")
    if version != VERSION:
        raise SnapshotError(str(path), f"snapshot version {version}, this build reads {VERSION}")
    if length > available:
        raise SnapshotError(str(path), f"manifest length {length} runs past the file end")
    return int(length)


def _parse_manifest(path: Path, head: bytes, manifest: bytes) -> dict[str, Any]:
    """The manifest's JSON object, after its own checksum was verified and its fields checked."""
    manifest_crc = _HEAD.unpack(head)[3]
    if crc32c.crc32c(manifest) != manifest_crc:
        raise SnapshotError(str(path), "manifest checksum mismatch")
    try:
        raw = orjson.loads(manifest)
    except orjson.JSONDecodeError as exc:
        raise SnapshotError(str(path), f"manifest is not JSON: {exc}") from None
    if type(raw) is not dict or not {"generation", "created_at", "position", "views"} <= set(raw):
        raise SnapshotError(str(path), "manifest lacks required fields")
    generation, created_at = raw["generation"], raw["created_at"]
    if type(generation) is not int or generation < 0:
        raise SnapshotError(str(path), f"manifest generation {generation!r} is not an int >= 0")
    if type(created_at) not in (int, float):
        raise SnapshotError(str(path), f"manifest created_at {created_at!r} is not a number")
    views = raw["views"]
    if type(views) is not list or not all(
        type(entry) is list
        and len(entry) == 2
        and type(entry[0]) is str
        and type(entry[1]) is int
        and entry[1] >= 0
        for entry in views
    ):
        raise SnapshotError(str(path), "manifest views must be [name, size >= 0] pairs")
    if len({entry[0] for entry in views}) != len(views):
        raise SnapshotError(str(path), "manifest names a view twice")
    return raw


def _info(path: Path, raw: Mapping[str, Any], size: int) -> SnapshotInfo:
    try:
        position = Position.from_json(orjson.dumps(raw["position"]))
    except (ValueError, TypeError) as exc:
        raise SnapshotError(str(path), f"bad position: {exc}") from None
    named = _NAME.match(path.name)
    if named is not None and int(named.group(1)) != raw["generation"]:
        raise SnapshotError(
            str(path), f"manifest generation {raw['generation']} does not match the file name"
        )
    return SnapshotInfo(path, int(raw["generation"]), position, float(raw["created_at"]), size)


def read_info(path: Path) -> SnapshotInfo:
    """The checked manifest of a snapshot file (blocking); ``SnapshotError`` when bad.

    Reads only the header and the manifest, whose own checksum is verified before it is parsed.
    """
    with path.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        head = handle.read(_HEAD.size)
        if len(head) < _HEAD.size:
            raise SnapshotError(str(path), "truncated header")
        length = _check_head(path, head, size - _HEAD.size - _CRC.size)
        manifest = handle.read(length)
    if len(manifest) != length:
        raise SnapshotError(str(path), "truncated manifest")
    return _info(path, _parse_manifest(path, head, manifest), size)


def _checksum_of(path: Path, handle: io.BufferedReader, size: int) -> int:
    """crc32c of the file's first ``size`` bytes, read in chunks that are not kept."""
    handle.seek(0)
    buffer = bytearray(min(_CHECK_CHUNK_BYTES, size))
    chunk = memoryview(buffer)
    crc, remaining = 0, size
    while remaining:
        got = handle.readinto(chunk[: min(len(chunk), remaining)])
        if not got:
            raise SnapshotError(str(path), "truncated file")
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
    with path.open("rb") as handle:
        file_size = os.fstat(handle.fileno()).st_size
        head = handle.read(_HEAD.size)
        if len(head) < _HEAD.size or file_size < _HEAD.size + _CRC.size:
            raise SnapshotError(str(path), "truncated file")
        length = _check_head(path, head, file_size - _HEAD.size - _CRC.size)
        body_size = file_size - _CRC.size
        crc = _checksum_of(path, handle, body_size)
        (body_crc,) = _CRC.unpack(handle.read(_CRC.size))
        if crc != body_crc:
            raise SnapshotError(str(path), "checksum mismatch")
        handle.seek(_HEAD.size)
        manifest = handle.read(length)
        raw = _parse_manifest(path, head, manifest)
        if _HEAD.size + length + sum(size for _, size in raw["views"]) != body_size:
            raise SnapshotError(str(path), "view sizes do not add up to the file size")
        crc = crc32c.crc32c(manifest, crc32c.crc32c(head))
        views: dict[str, bytes] = {}
        for name, size in raw["views"]:
            blob = handle.read(size)
            crc = crc32c.crc32c(blob, crc)
            views[name] = blob
    if crc != body_crc:
        raise SnapshotError(str(path), "changed while it was read (checksum mismatch)")
    return Snapshot(_info(path, raw, file_size), raw.get("cursors"), views)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SnapshotStore:
    """A directory of snapshots; the newest ``keep`` are kept."""

    def __init__(self, directory: str | os.PathLike[str], *, keep: int = 3) -> None:
        if type(keep) is not int or keep < 1:
            raise ValueError(f"keep must be a positive int, got {keep!r}")
        self.directory = Path(directory)
        self.keep = keep

    def _generations(self) -> list[tuple[int, Path]]:
        if not self.directory.is_dir():
            return []
        found = []
        for entry in self.directory.iterdir():
            match = _NAME.match(entry.name)
            if match:
                found.append((int(match.group(1)), entry))
        return sorted(found)

    def _write_blocking(self, position: Position, cursors: Any, views: Mapping[str, bytes]) -> Path:
        create_data_directory(self.directory)
        existing = self._generations()
        generation = existing[-1][0] + 1 if existing else 1
        final = self.directory / _file_name(generation)
        tmp = self.directory / f".{final.name}.tmp"
        data = _encode(generation, position, cursors, views)
        try:
            with tmp.open("wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as exc:
            # A full disk, say: the older snapshots are untouched; leave no partial file.
            tmp.unlink(missing_ok=True)
            raise SnapshotError(str(self.directory), f"cannot write a snapshot: {exc}") from exc
        tmp.replace(final)
        _fsync_dir(self.directory)
        self._prune_blocking()
        return final

    def _prune_blocking(self) -> None:
        existing = self._generations()
        for _, path in existing[: max(0, len(existing) - self.keep)]:
            path.unlink(missing_ok=True)
        for stray in self.directory.glob(".snapshot-*.tmp"):
            stray.unlink(missing_ok=True)
        _fsync_dir(self.directory)

    async def write(
        self, position: Position, cursors: Any, views: Mapping[str, bytes]
    ) -> SnapshotInfo:
        """Write a snapshot durably, then drop all but the newest ``keep``."""
        path = await anyio.to_thread.run_sync(self._write_blocking, position, cursors, views)
        return await anyio.to_thread.run_sync(read_info, path)

    def _valid_infos_blocking(self) -> list[SnapshotInfo]:
        infos = []
        for _, path in self._generations():
            try:
                infos.append(read_info(path))
            except (SnapshotError, OSError, ValueError) as exc:
                logger.warning("skipping snapshot %s: %s", path, exc)
        return infos

    async def infos(self) -> list[SnapshotInfo]:
        """Snapshots whose manifest checks out, oldest first (views not checked)."""
        return await anyio.to_thread.run_sync(self._valid_infos_blocking)

    async def oldest_kept_position(self) -> Position | None:
        """The position of the oldest kept snapshot: the log must keep every record after it."""
        infos = await self.infos()
        return infos[0].position if infos else None

    def _newest_valid_blocking(
        self, required_views: Collection[str], older_than: int | None
    ) -> Snapshot | None:
        for generation, path in reversed(self._generations()):
            if older_than is not None and generation >= older_than:
                continue
            try:
                snapshot = read_snapshot(path)
            except (SnapshotError, OSError, ValueError) as exc:
                logger.warning("skipping snapshot %s: %s", path, exc)
                continue
            missing = sorted(set(required_views) - set(snapshot.views))
            if missing:
                logger.warning("skipping snapshot %s: it lacks views %s", path, missing)
                continue
            return snapshot
        return None

    async def newest_valid(
        self, required_views: Collection[str] = (), *, older_than: int | None = None
    ) -> Snapshot | None:
        """The newest snapshot that checks out and holds every view in ``required_views``
        (among generations below ``older_than`` when given); None when there is none."""
        return await anyio.to_thread.run_sync(
            self._newest_valid_blocking, required_views, older_than
        )
