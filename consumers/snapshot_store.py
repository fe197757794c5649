"""Durable snapshots of a follower: every view, the cursors, and the log position they cover.

One file per snapshot, ``snapshot-<generation>.swasnap``::

    b"SWAESNAP" | u32 version | u32 manifest length | u32 manifest crc32c | manifest (JSON)
    | view bytes, in manifest order | u32 crc32c of everything before it

The manifest holds the position (just after the last record the views include), the cursors,
the view names and sizes, the generation and the creation time. The manifest has its own
checksum so a snapshot's position can be read without reading its views. Files are written
tmp -> fsync -> rename -> fsync(dir); a corrupt or foreign-version file is skipped with a
warning and never loaded. Only the newest ``keep`` files are kept.
"""

from __future__ import annotations

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

logger = logging.getLogger(__name__)

MAGIC: Final = b"SWAESNAP"
VERSION: Final = 1
_HEAD: Final = struct.Struct("<8sIII")
_CRC: Final = struct.Struct("<I")
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


def _parse_manifest(path: Path, head: bytes, manifest: bytes) -> dict[str, Any]:
    magic, version, length, manifest_crc = _HEAD.unpack(head)
    if magic != MAGIC:
        raise SnapshotError(str(path), f"not a snapshot (magic {magic!r})")
    if version != VERSION:
        raise SnapshotError(str(path), f"snapshot version {version}, this build reads {VERSION}")
    if len(manifest) != length or crc32c.crc32c(manifest) != manifest_crc:
        raise SnapshotError(str(path), "manifest checksum mismatch")
    raw = orjson.loads(manifest)
    if type(raw) is not dict or not {"generation", "created_at", "position", "views"} <= set(raw):
        raise SnapshotError(str(path), "manifest lacks required fields")
    return raw


def _info(path: Path, raw: Mapping[str, Any], size: int) -> SnapshotInfo:
    try:
        position = Position.from_json(orjson.dumps(raw["position"]))
    except ValueError as exc:
        raise SnapshotError(str(path), f"bad position: {exc}") from None
    return SnapshotInfo(path, int(raw["generation"]), position, float(raw["created_at"]), size)


def read_info(path: Path) -> SnapshotInfo:
    """The checked manifest of a snapshot file (blocking); ``SnapshotError`` when bad."""
    with path.open("rb") as handle:
        head = handle.read(_HEAD.size)
        if len(head) < _HEAD.size:
            raise SnapshotError(str(path), "truncated header")
        length = _HEAD.unpack(head)[2]
        raw = _parse_manifest(path, head, handle.read(length))
    return _info(path, raw, path.stat().st_size)


def _view_sizes(path: Path, views: object) -> list[tuple[str, int]]:
    if type(views) is not list or not all(
        type(v) is list and len(v) == 2 and type(v[0]) is str and type(v[1]) is int and v[1] >= 0
        for v in views
    ):
        raise SnapshotError(str(path), "manifest lists its views wrongly")
    return [(name, size) for name, size in views]


def read_snapshot(path: Path) -> Snapshot:
    """Read and fully check a snapshot file (blocking); ``SnapshotError`` when bad.

    Each view is read straight into its own bytes (no copy of the whole file), the checksum
    computed as the parts arrive; nothing is returned unless the whole file checks out."""
    with path.open("rb") as handle:
        file_size = os.fstat(handle.fileno()).st_size
        head = handle.read(_HEAD.size)
        if len(head) < _HEAD.size or file_size < _HEAD.size + _CRC.size:
            raise SnapshotError(str(path), "truncated file")
        length = _HEAD.unpack(head)[2]
        manifest = handle.read(length)
        raw = _parse_manifest(path, head, manifest)
        crc = crc32c.crc32c(manifest, crc32c.crc32c(head))
        sizes = _view_sizes(path, raw["views"])
        if _HEAD.size + length + sum(size for _, size in sizes) + _CRC.size != file_size:
            raise SnapshotError(str(path), "view sizes do not add up to the file size")
        views: dict[str, bytes] = {}
        for name, size in sizes:
            blob = handle.read(size)
            crc = crc32c.crc32c(blob, crc)
            views[name] = blob
        (body_crc,) = _CRC.unpack(handle.read(_CRC.size))
    if crc != body_crc:
        raise SnapshotError(str(path), "checksum mismatch")
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
        self.directory.mkdir(parents=True, exist_ok=True)
        existing = self._generations()
        generation = existing[-1][0] + 1 if existing else 1
        final = self.directory / _file_name(generation)
        tmp = self.directory / f".{final.name}.tmp"
        data = _encode(generation, position, cursors, views)
        with tmp.open("wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
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
