"""The blocking write path: frames into the active segment, rolling to new segments.

Runs only in worker threads, one call at a time (the group committer serialises them).
A segment is sealed by syncing it (unless the policy is ``never``) before the next one is
created, so a newer segment never exists ahead of an older one's data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from log.file.index import IndexBuilder
from log.file.segment import SegmentWriter, fsync_directory


@dataclass(slots=True)
class WriteStats:
    """Counters of one open log's write path."""

    records: int = 0
    bytes_written: int = 0
    writes: int = 0
    syncs: int = 0
    segments_rolled: int = 0


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
        """Append ``frames`` (offsets from ``first_offset``), then sync under the policy."""
        chunk: list[bytes] = []
        index_entries = bytearray()
        chunk_bytes = 0
        rolled = False
        for offset, frame in enumerate(frames, start=first_offset):
            size = self._active.size_bytes + chunk_bytes
            if size > 0 and size + len(frame) > self._segment_bytes:
                self._flush(chunk, index_entries)
                chunk, index_entries, chunk_bytes = [], bytearray(), 0
                self._roll(offset)
                rolled = True
                size = 0
            index_entries += self._index.entry_for(offset, size)
            chunk.append(frame)
            chunk_bytes += len(frame)
        self._flush(chunk, index_entries)
        self.stats.records += len(frames)
        if self._sync_each_write:
            self._active.sync()
            self.stats.syncs += 1
        if rolled:
            self._on_roll()

    def sync(self) -> None:
        """fdatasync the active segment now (used on close)."""
        self._active.sync()
        self.stats.syncs += 1

    def close(self) -> None:
        """Close the active segment's files."""
        self._active.close()

    def _flush(self, chunk: list[bytes], index_entries: bytearray) -> None:
        if not chunk:
            return
        data = b"".join(chunk)
        self._active.write(data, bytes(index_entries))
        self.stats.bytes_written += len(data)
        self.stats.writes += 1

    def _roll(self, base_offset: int) -> None:
        if self._sync_on_roll:
            self._active.sync()
            self.stats.syncs += 1
        self._active.close()
        self._active = SegmentWriter(self.directory, base_offset, 0)
        self._index = IndexBuilder(base_offset, self._index_interval_bytes)
        fsync_directory(self.directory)
        self.stats.segments_rolled += 1
