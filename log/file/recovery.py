"""Open-time recovery of the active (last) segment.

The segment is scanned frame by frame, checking length bounds, CRC and that offsets follow
each other. When a frame fails:

- if a valid frame with one of the next offsets appears later in the file, the damage is in
  the middle of durable data: nothing is cut, the damaged offsets are reported, and readers
  raise ``CorruptRecordError`` when they reach them;
- otherwise it is a torn tail (a write the crash interrupted): the file is truncated at the
  last good byte, synced, and the cut is reported.

The active segment's sparse index is rebuilt from the scan.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from log.file.framing import (
    FrameIncompleteError,
    FrameInvalidError,
    decode_frame,
    next_good_frame,
)
from log.file.index import IndexBuilder
from log.file.segment import index_path, segment_path


@dataclass(frozen=True, slots=True)
class RecoveredTail:
    """What open-time recovery cut from the end of the active segment."""

    segment: str
    valid_bytes: int
    truncated_bytes: int
    reason: str


@dataclass(slots=True)
class SegmentScan:
    """The outcome of scanning one segment."""

    next_offset: int
    valid_bytes: int
    index_entries: bytearray = field(default_factory=bytearray)
    last_indexed_pos: int = -1
    corrupt_offsets: list[int] = field(default_factory=list)
    tail_reason: str | None = None


def scan_segment(
    buf: bytes, base_offset: int, max_body_bytes: int, interval_bytes: int
) -> SegmentScan:
    """Scan a whole segment's bytes; stop at a torn tail and skip damaged middles."""
    scan = SegmentScan(next_offset=base_offset, valid_bytes=0)
    builder = IndexBuilder(base_offset, interval_bytes)
    pos, expected = 0, base_offset
    while pos < len(buf):
        try:
            frame = decode_frame(buf, pos, max_body_bytes)
            if frame.offset != expected:
                raise FrameInvalidError(f"offset {frame.offset} where {expected} was expected")
        except (FrameIncompleteError, FrameInvalidError) as exc:
            resumed = next_good_frame(buf, pos, expected, max_body_bytes)
            if resumed is None:
                scan.tail_reason = str(exc) or "incomplete frame"
                break
            scan.corrupt_offsets.extend(range(expected, resumed[1]))
            pos, expected = resumed
            continue
        entry = builder.entry_for(expected, pos)
        if entry:
            scan.index_entries += entry
            scan.last_indexed_pos = pos
        pos, expected = frame.end_pos, expected + 1
        scan.valid_bytes, scan.next_offset = pos, expected
    return scan


def recover_active_segment(
    directory: Path, base_offset: int, max_body_bytes: int, interval_bytes: int
) -> tuple[SegmentScan, RecoveredTail | None]:
    """Scan the active segment, truncate a torn tail, rewrite its index (blocking)."""
    path = segment_path(directory, base_offset)
    buf = path.read_bytes()
    scan = scan_segment(buf, base_offset, max_body_bytes, interval_bytes)
    tail = None
    if scan.valid_bytes < len(buf):
        tail = RecoveredTail(
            segment=path.name,
            valid_bytes=scan.valid_bytes,
            truncated_bytes=len(buf) - scan.valid_bytes,
            reason=scan.tail_reason or "incomplete frame",
        )
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.ftruncate(fd, scan.valid_bytes)
            os.fsync(fd)
        finally:
            os.close(fd)
    index_path(directory, base_offset).write_bytes(bytes(scan.index_entries))
    return scan, tail
