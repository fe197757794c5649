"""Segment files: naming by base offset, listing, and the append-only writer of one segment.

A segment ``<base:020d>.log`` holds the frames of offsets ``base, base+1, ...``; its sparse
index sits beside it as ``<base:020d>.idx``. Everything here is blocking and runs in a worker
thread.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from cache.errors import SwaEsError
from log.errors import MissingSegmentError
from log.file.index import ENTRY, parse_index

logger = logging.getLogger(__name__)

SEGMENT_SUFFIX = ".log"
INDEX_SUFFIX = ".idx"
_NAME_DIGITS = 20
INDEX_FLUSH_BYTES = 512
"""Index entries are written in bunches of this many bytes (64 entries), off the hot path."""
MAX_PENDING_INDEX_BYTES = 64 * 1024
"""Index entries kept for a retry while the index file cannot be written (a hint: dropping
them only makes some reads scan further)."""


def segment_path(directory: Path, base_offset: int) -> Path:
    """The segment file of ``base_offset``."""
    return directory / f"{base_offset:0{_NAME_DIGITS}d}{SEGMENT_SUFFIX}"


def index_path(directory: Path, base_offset: int) -> Path:
    """The sparse index file of the segment at ``base_offset``."""
    return directory / f"{base_offset:0{_NAME_DIGITS}d}{INDEX_SUFFIX}"


def list_segments(directory: Path) -> list[int]:
    """Base offsets of every segment in ``directory``, ascending."""
    bases = []
    for entry in os.scandir(directory):
        name = entry.name
        stem = name[: -len(SEGMENT_SUFFIX)]
        if name.endswith(SEGMENT_SUFFIX) and len(stem) == _NAME_DIGITS and stem.isdigit():
            bases.append(int(stem))
    bases.sort()
    return bases


def list_segment_files(directory: Path) -> tuple[list[int], list[int]]:
    """Base offsets of every segment in ``directory`` and of every index file whose segment
    file is gone (a lost segment: the writer deletes a segment's index before the segment
    itself, so none of its own deletions leaves one), each ascending."""
    segments: list[int] = []
    indexes: list[int] = []
    for entry in os.scandir(directory):
        name = entry.name
        stem = name[: -len(SEGMENT_SUFFIX)]
        if len(stem) != _NAME_DIGITS or not stem.isdigit():
            continue
        if name.endswith(SEGMENT_SUFFIX):
            segments.append(int(stem))
        elif name.endswith(INDEX_SUFFIX):
            indexes.append(int(stem))
    segments.sort()
    present = set(segments)
    return segments, sorted(base for base in indexes if base not in present)


def missing_segment(directory: Path, base_offset: int) -> MissingSegmentError:
    """The error of the segment at ``base_offset``, gone while its index remains."""
    name = segment_path(directory, base_offset).name
    return MissingSegmentError(
        name,
        base_offset,
        f"its index {index_path(directory, base_offset).name} remains in {directory}; restore "
        "the segment from a backup (if it was deleted on purpose, delete its index too: the "
        "records in it are lost)",
    )


def remove_segment(directory: Path, base_offset: int) -> None:
    """Delete a segment and its index: the index first, so an index never outlives its
    segment (an index without one means a lost segment, ``list_orphan_indexes``)."""
    index_path(directory, base_offset).unlink(missing_ok=True)
    segment_path(directory, base_offset).unlink(missing_ok=True)


def fsync_directory(directory: Path) -> None:
    """Make creations, renames and deletions in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ShortWriteError(SwaEsError, OSError):
    """A write failed after ``written`` of its bytes reached the file (``errno`` is the cause's)."""

    def __init__(self, cause: OSError, written: int) -> None:
        super().__init__(cause.errno, cause.strerror)
        self.cause = cause
        self.written = written


class SyncError(SwaEsError):
    """fdatasync failed: what reached the disk is unknown, so the writer must not go on.

    Deliberately not an ``OSError``, so no caller mistakes it for a write that can be undone.
    """

    def __init__(self, path: Path, cause: OSError) -> None:
        super().__init__(f"fdatasync of {path} failed: {cause}")
        self.cause = cause


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """``os.write`` until every byte is written (a short write is retried, not lost); a failure
    raises ``ShortWriteError`` saying how many bytes did reach the file."""
    view = memoryview(data)
    total = len(view)
    while view:
        try:
            written = os.write(fd, view)
        except OSError as exc:
            raise ShortWriteError(exc, total - len(view)) from exc
        view = view[written:]


class SegmentWriter:
    """The open active segment: appends frames and keeps its sparse index file in step."""

    def __init__(self, directory: Path, base_offset: int, size_bytes: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.size_bytes = size_bytes
        self.path = segment_path(directory, base_offset)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        self._fd = os.open(self.path, flags, 0o644)
        try:
            # read-write: ``rewind`` reads the entries it keeps
            index_flags = flags & ~os.O_WRONLY | os.O_RDWR
            self._index_fd = os.open(index_path(directory, base_offset), index_flags, 0o644)
        except BaseException:
            os.close(self._fd)
            raise
        self._index_bytes = os.fstat(self._index_fd).st_size
        self._pending_index = bytearray()

    def write(self, data: bytes, index_entries: bytes) -> None:
        """Append framed bytes; their index entries reach the index file in bunches (the index
        is only a hint, so it may lag the segment). A failure raises ``ShortWriteError``; the
        caller cuts the file back with ``rewind``."""
        write_all(self._fd, data)
        self.size_bytes += len(data)
        self._pending_index += index_entries
        if len(self._pending_index) >= INDEX_FLUSH_BYTES:
            self.flush_index()

    def flush_index(self) -> None:
        """Write the index entries held back so far. Never fails: the index is a hint, so when
        its write fails (a full disk) the file is cut back to whole entries and the entries
        wait for the next flush (or are dropped past ``MAX_PENDING_INDEX_BYTES``)."""
        if self._index_bytes < 0:
            self._pending_index.clear()
        if not self._pending_index:
            return
        try:
            write_all(self._index_fd, self._pending_index)
        except OSError as exc:
            logger.warning("index %s not updated (%s); it is only a hint", self.path.name, exc)
            try:
                os.ftruncate(self._index_fd, self._index_bytes)
            except OSError:
                self._index_bytes = -1  # unknown: stop writing entries to this index
            if len(self._pending_index) > MAX_PENDING_INDEX_BYTES or self._index_bytes < 0:
                self._pending_index.clear()
            return
        self._index_bytes += len(self._pending_index)
        self._pending_index.clear()

    def rewind(self, size_bytes: int) -> int:
        """Cut the segment back to ``size_bytes`` (a frame boundary) and its index to the
        entries before it; the position of the last index entry kept (-1: none)."""
        os.ftruncate(self._fd, size_bytes)
        self.size_bytes = size_bytes
        self._pending_index.clear()
        kept = bytearray()
        if self._index_bytes > 0:
            data = os.pread(self._index_fd, self._index_bytes, 0)
            for entry in parse_index(data, size_bytes):
                kept += ENTRY.pack(*entry)
        os.ftruncate(self._index_fd, len(kept))
        self._index_bytes = len(kept)
        return ENTRY.unpack_from(kept, len(kept) - ENTRY.size)[1] if kept else -1

    def sync(self) -> None:
        """fdatasync the segment's data; a failure raises ``SyncError``."""
        try:
            os.fdatasync(self._fd)
        except OSError as exc:
            raise SyncError(self.path, exc) from exc

    def close(self) -> None:
        """Flush the index and close both files (without syncing)."""
        try:
            self.flush_index()
        finally:
            os.close(self._fd)
            os.close(self._index_fd)
