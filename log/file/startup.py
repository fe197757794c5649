"""Opening a log directory for writing: lock, recover the active segment, ready the writer.

Blocking; runs in a worker thread.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from log.directories import create_data_directory
from log.file.framing import MAX_BODY_BYTES
from log.file.index import IndexBuilder
from log.file.lock import DirectoryLock
from log.file.recovery import RecoveredTail, recover_active_segment
from log.file.segment import (
    SegmentWriter,
    fsync_directory,
    list_segment_files,
    missing_segment,
    remove_segment,
    segment_path,
)

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class OpenedDirectory:
    """A locked, recovered log directory ready for appends."""

    lock: DirectoryLock
    active: SegmentWriter
    index: IndexBuilder
    next_offset: int
    recovered_tail: RecoveredTail | None
    corrupt_offsets: list[int] = field(default_factory=list)


def _drop_empty_trailing_segments(directory: Path, bases: list[int]) -> list[int]:
    """A crash right after a roll can leave an empty newest segment; the one before it is
    complete (it was synced before the roll), so it becomes the active one again."""
    while len(bases) > 1 and segment_path(directory, bases[-1]).stat().st_size == 0:
        remove_segment(directory, bases[-1])
        bases = bases[:-1]
    return bases


def open_for_writing(directory: Path, index_interval_bytes: int) -> OpenedDirectory:
    """Create ``directory`` if needed, take its lock, recover and open the active segment."""
    create_data_directory(directory)
    lock = DirectoryLock(directory)
    lock.acquire()
    try:
        bases, lost = list_segment_files(directory)
        if lost and (not bases or lost[-1] > bases[-1]):
            # the newest records are gone: appending would give their offsets to new ones
            raise missing_segment(directory, lost[-1])
        bases = _drop_empty_trailing_segments(directory, bases) or [0]
        base = bases[-1]
        segment_path(directory, base).touch(exist_ok=True)
        scan, tail = recover_active_segment(directory, base, MAX_BODY_BYTES, index_interval_bytes)
        active = SegmentWriter(directory, base, scan.valid_bytes)
        fsync_directory(directory)
    except BaseException:
        lock.release()
        raise
    if tail is not None:
        logger.warning(
            "log %s: truncated a torn tail of %d bytes in %s after byte %d (%s)",
            directory,
            tail.truncated_bytes,
            tail.segment,
            tail.valid_bytes,
            tail.reason,
        )
    if scan.corrupt_offsets:
        logger.warning(
            "log %s: damaged record(s) at offsets %s in %s kept in place; readers will raise there",
            directory,
            scan.corrupt_offsets,
            segment_path(directory, base).name,
        )
    index = IndexBuilder(base, index_interval_bytes, scan.last_indexed_pos)
    return OpenedDirectory(lock, active, index, scan.next_offset, tail, scan.corrupt_offsets)
