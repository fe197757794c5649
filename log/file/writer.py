"""The blocking write path: frames into the active segment, rolling to new segments.

Runs only in worker threads, one call at a time (the group committer serialises them).
A segment is sealed by syncing it (unless the policy is ``never``) before the next one is
created, so a newer segment never exists ahead of an older one's data.

A write that fails part-way (a full disk, say) is cut back to its last complete frame: the torn
frame goes, segments the write created beyond that frame go, and the complete frames stay, so
a reader in another process never sees a record that is later taken back. The writer then stays
usable; ``RewoundWriteError`` tells the committer how many frames were kept. A failed fdatasync
is different (what reached the disk is unknown): it propagates and stops the log.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cache.errors import SwaEsError
from log.errors import LogDiskFullError, LogWriteError
from log.file.index import IndexBuilder
from log.file.segment import (
    SegmentWriter,
    ShortWriteError,
    fsync_directory,
    list_segments,
    remove_segment,
)

_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


@dataclass(slots=True)
class WriteStats:
    """Counters of one open log's write path."""

    records: int = 0
    bytes_written: int = 0
    writes: int = 0
    syncs: int = 0
    sync_s_total: float = 0.0
    """Seconds spent in fdatasync, all syncs together."""
    sync_s_max: float = 0.0
    """The slowest single fdatasync, in seconds: the disk's stalls, which every commit waits out."""
    segments_rolled: int = 0
    rewinds: int = 0


def mount_point_of(directory: Path) -> str:
    """The mount point of the filesystem holding ``directory`` (for error messages)."""
    path = directory.absolute()
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return str(path)


class RewoundWriteError(SwaEsError):
    """A write failed part-way and was cut back: its first ``kept_frames`` frames are on disk,
    the rest are not. ``for_call`` builds the public error for one append call."""

    def __init__(self, directory: Path, cause: OSError, kept_frames: int) -> None:
        super().__init__(f"write to {directory} failed and was cut back: {cause}")
        self.directory = directory
        self.cause = cause
        self.kept_frames = kept_frames

    def for_call(self, first_offset: int, records: int, kept_end: int) -> LogWriteError:
        """The error of an append of ``records`` records from ``first_offset``, when the log
        kept everything below ``kept_end``."""
        kept = min(records, max(0, kept_end - first_offset))
        detail = (
            f"append of {records} record(s) at offset {first_offset} failed "
            f"({kept} of them written): {self.cause.strerror or self.cause}"
        )
        if self.cause.errno in _DISK_FULL_ERRNOS:
            free = _free_bytes(self.directory)
            return LogDiskFullError(
                str(self.directory),
                mount_point_of(self.directory),
                f"{detail}; {free} bytes free there now" if free is not None else detail,
                records_written=kept,
            )
        return LogWriteError(
            f"write to log {self.directory} failed: {detail}; no partial record was kept, retry",
            retriable=True,
        )


def _free_bytes(directory: Path) -> int | None:
    try:
        stat = os.statvfs(directory)
    except OSError:
        return None
    return stat.f_bavail * stat.f_frsize


class SegmentedWriter:
    """Owns the active segment of a log directory held under its writer lock."""

    def __init__(
        self,
        directory: Path,
        active: SegmentWriter,
        index: IndexBuilder,
        *,
        segment_bytes: int,
        sync_each_write: bool,
        sync_on_roll: bool,
        on_roll: Callable[[], None],
    ) -> None:
        self.directory = directory
        self.stats = WriteStats()
        self._active = active
        self._index = index
        self._segment_bytes = segment_bytes
        self._sync_each_write = sync_each_write
        self._sync_on_roll = sync_on_roll
        self._on_roll = on_roll
        self._index_interval_bytes = index.interval_bytes

    def write(self, frames: list[bytes], first_offset: int) -> None:
        """Append ``frames`` (offsets from ``first_offset``), then sync under the policy.

        A failed write or roll raises ``RewoundWriteError`` after cutting the log back to the
        last complete frame (synced under the policy); a failed sync raises ``SyncError``.
        """
        start = (self._active.base_offset, self._active.size_bytes)
        placed: list[tuple[int, int]] = []
        try:
            rolled = self._write_frames(frames, first_offset, placed)
        except OSError as exc:
            kept = len(placed)
            base, end = placed[-1] if placed else start
            self._rewind(base, end)
            if self._sync_each_write:
                self.sync()
            self.stats.records += kept
            raise RewoundWriteError(self.directory, exc, kept) from exc
        self.stats.records += len(frames)
        if self._sync_each_write:
            self.sync()
        if rolled:
            self._on_roll()

    def sync(self) -> None:
        """fdatasync the active segment now (used on close)."""
        started = time.perf_counter()
        self._active.sync()
        took_s = time.perf_counter() - started
        stats = self.stats
        stats.syncs += 1
        stats.sync_s_total += took_s
        stats.sync_s_max = max(stats.sync_s_max, took_s)

    def close(self) -> None:
        """Close the active segment's files."""
        self._active.close()

    def _write_frames(
        self, frames: list[bytes], first_offset: int, placed: list[tuple[int, int]]
    ) -> bool:
        """Write the frames, rolling segments as they fill; ``placed`` gets each complete
        frame's (segment base, end position). Whether a roll happened."""
        chunk: list[bytes] = []
        index_entries = bytearray()
        chunk_bytes = 0
        rolled = False
        for offset, frame in enumerate(frames, start=first_offset):
            size = self._active.size_bytes + chunk_bytes
            if size > 0 and size + len(frame) > self._segment_bytes:
                self._flush(chunk, index_entries, placed)
                chunk, index_entries, chunk_bytes = [], bytearray(), 0
                self._roll(offset)
                rolled = True
                size = 0
            index_entries += self._index.entry_for(offset, size)
            chunk.append(frame)
            chunk_bytes += len(frame)
        self._flush(chunk, index_entries, placed)
        return rolled

    def _flush(
        self, chunk: list[bytes], index_entries: bytearray, placed: list[tuple[int, int]]
    ) -> None:
        if not chunk:
            return
        data = b"".join(chunk)
        base, end = self._active.base_offset, self._active.size_bytes
        try:
            self._active.write(data, bytes(index_entries))
        except ShortWriteError as exc:
            landed = end + exc.written
            for frame in chunk:
                if end + len(frame) > landed:
                    break
                end += len(frame)
                placed.append((base, end))
            raise
        for frame in chunk:
            end += len(frame)
            placed.append((base, end))
        self.stats.bytes_written += len(data)
        self.stats.writes += 1

    def _roll(self, base_offset: int) -> None:
        if self._sync_on_roll:
            self.sync()
        # Open the new segment before closing the old one: if it cannot be created, the old
        # one is still the active segment and the write is cut back there.
        new_active = SegmentWriter(self.directory, base_offset, 0)
        self._active.close()
        self._active = new_active
        self._index = IndexBuilder(base_offset, self._index_interval_bytes)
        fsync_directory(self.directory)
        self.stats.segments_rolled += 1

    def _rewind(self, base: int, end: int) -> None:
        """Make (``base``, ``end``) the end of the log: drop newer segments, cut the rest."""
        if self._active.base_offset != base:
            self._active.close()
            for newer in list_segments(self.directory):
                if newer > base:
                    remove_segment(self.directory, newer)
            fsync_directory(self.directory)
            self._active = SegmentWriter(self.directory, base, end)
        last_indexed_pos = self._active.rewind(end)
        self._index = IndexBuilder(base, self._index_interval_bytes, last_indexed_pos)
        self.stats.rewinds += 1
