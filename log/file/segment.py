"""Segment files: naming by base offset, listing, and the append-only writer of one segment.

A segment ``<base:020d>.log`` holds the frames of offsets ``base, base+1, ...``; its sparse
index sits beside it as ``<base:020d>.idx``. Everything here is blocking and runs in a worker
thread.
"""

from __future__ import annotations

import os
from pathlib import Path

SEGMENT_SUFFIX = ".log"
INDEX_SUFFIX = ".idx"
_NAME_DIGITS = 20
INDEX_FLUSH_BYTES = 512
"""Index entries are written in bunches of this many bytes (64 entries), off the hot path."""


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


def fsync_directory(directory: Path) -> None:
    """Make creations, renames and deletions in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """``os.write`` until every byte is written (a short write is retried, not lost)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
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
        self._index_fd = os.open(index_path(directory, base_offset), flags, 0o644)
        self._pending_index = bytearray()

    def write(self, data: bytes, index_entries: bytes) -> None:
        """Append framed bytes; their index entries reach the index file in bunches (the index
        is only a hint, so it may lag the segment)."""
        write_all(self._fd, data)
        self.size_bytes += len(data)
        self._pending_index += index_entries
        if len(self._pending_index) >= INDEX_FLUSH_BYTES:
            self.flush_index()

    def flush_index(self) -> None:
        """Write the index entries held back so far."""
        if self._pending_index:
            write_all(self._index_fd, self._pending_index)
            self._pending_index.clear()

    def sync(self) -> None:
        """fdatasync the segment's data."""
        os.fdatasync(self._fd)

    def close(self) -> None:
        """Flush the index and close both files (without syncing)."""
        try:
            self.flush_index()
        finally:
            os.close(self._fd)
            os.close(self._index_fd)
