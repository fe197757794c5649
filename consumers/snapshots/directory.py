"""``DirectorySnapshotStore``: one file per snapshot in a directory on the follower's disk.

Files are named ``snapshot-<generation>.swasnap`` (format: ``consumers.snapshots.format``) and
written tmp -> fsync -> link -> fsync(dir): a failed write leaves no partial file behind, and two
writers sharing the directory never take the same generation (the link fails for the second,
which takes the next). A
corrupt or foreign-version file is skipped with a warning and never loaded. Only the newest
``keep`` files are kept.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from consumers.errors import SnapshotError
from consumers.snapshots.base import Snapshot, SnapshotInfo
from consumers.snapshots.format import (
    FILE_NAME,
    decode_snapshot,
    encode_snapshot,
    file_name,
    read_info,
    read_snapshot,
)
from log import LogIdentity, Position
from log.directories import create_data_directory

logger = logging.getLogger(__name__)

_STRAY_TMP_AGE_S = 600.0


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DirectorySnapshotStore:
    """A directory of snapshots; the newest ``keep`` are kept."""

    def __init__(self, directory: str | os.PathLike[str], *, keep: int = 3) -> None:
        if type(keep) is not int or keep < 1:
            raise ValueError(f"keep must be a positive int, got {keep!r}")
        self.directory = Path(directory)
        self.keep = keep

    @property
    def url(self) -> str:
        """The directory."""
        return str(self.directory)

    def _generations(self) -> list[tuple[int, Path]]:
        if not self.directory.is_dir():
            return []
        found = []
        for entry in self.directory.iterdir():
            match = FILE_NAME.match(entry.name)
            if match:
                found.append((int(match.group(1)), entry))
        return sorted(found)

    def _write_blocking(self, data_of: Callable[[int], bytes]) -> SnapshotInfo:
        create_data_directory(self.directory)
        while True:
            existing = self._generations()
            generation = existing[-1][0] + 1 if existing else 1
            final = self.directory / file_name(generation)
            data = data_of(generation)
            if self._claim(final, data):
                break
        _fsync_dir(self.directory)
        self._prune_blocking()
        # from the bytes written: a writer sharing the store may have pruned the file already
        return decode_snapshot(data, final.name, str(final)).info

    def _claim(self, final: Path, data: bytes) -> bool:
        """Write ``data`` durably as ``final`` unless another writer took that name first
        (False). The file appears whole or not at all."""
        tmp = self.directory / f".{final.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            with tmp.open("wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            # link, not rename: it refuses to replace the snapshot of a concurrent writer
            os.link(tmp, final)
        except FileExistsError:
            return False
        except OSError as exc:
            # A full disk, say: the older snapshots are untouched; leave no partial file.
            raise SnapshotError(str(self.directory), f"cannot write a snapshot: {exc}") from exc
        finally:
            tmp.unlink(missing_ok=True)
        return True

    def _prune_blocking(self) -> None:
        existing = self._generations()
        for _, path in existing[: max(0, len(existing) - self.keep)]:
            path.unlink(missing_ok=True)
        stale_before = time.time() - _STRAY_TMP_AGE_S  # a live writer's file is younger
        for stray in self.directory.glob(".snapshot-*.tmp"):
            with contextlib.suppress(OSError):
                if stray.stat().st_mtime < stale_before:
                    stray.unlink()
        _fsync_dir(self.directory)

    async def write(
        self,
        position: Position,
        cursors: Any,
        views: Mapping[str, bytes],
        digests: Mapping[str, str | None] | None = None,
        *,
        log_identity: LogIdentity | None = None,
    ) -> SnapshotInfo:
        """Write a snapshot durably, then drop all but the newest ``keep``; ``log_identity``
        is recorded in it."""

        def data_of(generation: int) -> bytes:
            return encode_snapshot(generation, position, cursors, views, digests, log_identity)

        return await anyio.to_thread.run_sync(self._write_blocking, data_of)

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

    async def close(self) -> None:
        """Nothing to release."""
