"""The sparse index of a segment: ``(u32 relative offset, u32 file position)`` pairs.

An entry is added when at least ``interval_bytes`` of frames were written since the last one.
The index carries no checksum and is only a hint: readers check the frame they land on and
fall back to scanning the segment from its start, and recovery rebuilds the active segment's
index from the frames themselves.
"""

from __future__ import annotations

import bisect
import struct
from pathlib import Path

ENTRY = struct.Struct("<II")


class IndexBuilder:
    """Decides which frames of the active segment get an index entry."""

    def __init__(self, base_offset: int, interval_bytes: int, last_indexed_pos: int = -1) -> None:
        self.base_offset = base_offset
        self.interval_bytes = interval_bytes
        self._last_pos = last_indexed_pos

    def entry_for(self, offset: int, pos: int) -> bytes:
        """The packed entry for the frame of ``offset`` at ``pos``, or b"" when not due."""
        if self._last_pos >= 0 and pos - self._last_pos < self.interval_bytes:
            return b""
        self._last_pos = pos
        return ENTRY.pack(offset - self.base_offset, pos)


def parse_index(data: bytes, segment_size_bytes: int) -> list[tuple[int, int]]:
    """The entries of an index file, cut at the first one that is not plausible."""
    entries: list[tuple[int, int]] = []
    usable = len(data) - len(data) % ENTRY.size
    for rel_offset, pos in ENTRY.iter_unpack(data[:usable]):
        if pos >= segment_size_bytes or (entries and (rel_offset, pos) <= entries[-1]):
            break
        entries.append((rel_offset, pos))
    return entries


def load_index(path: Path, segment_size_bytes: int) -> list[tuple[int, int]]:
    """The plausible entries of the index file at ``path`` (none when it is missing)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    return parse_index(data, segment_size_bytes)


def floor_entry(entries: list[tuple[int, int]], rel_offset: int) -> tuple[int, int]:
    """The last entry at or before ``rel_offset``; ``(0, 0)`` (the segment start) if none."""
    i = bisect.bisect_right(entries, (rel_offset, 2**32))
    return entries[i - 1] if i else (0, 0)
