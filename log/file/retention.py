"""Retention of sealed segments by total size and age, bounded by pins.

Only a prefix of sealed segments is ever deleted (never the active one, never a hole), and a
segment is deleted only when every record in it lies before the smallest pinned offset.
A segment's age is the modification time of its file, i.e. when its last record was written.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from pathlib import Path

from log.file.segment import fsync_directory, list_segments, remove_segment, segment_path

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """What retention needs to know about one segment."""

    base_offset: int
    size_bytes: int
    mtime_s: float


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """Keep at most ``retention_bytes`` and nothing older than ``retention_age_s`` (None: no
    limit)."""

    retention_bytes: int | None = None
    retention_age_s: float | None = None

    @property
    def enabled(self) -> bool:
        """Whether any limit is set."""
        return self.retention_bytes is not None or self.retention_age_s is not None


def select_expired(
    segments: list[SegmentInfo], policy: RetentionPolicy, pinned_offset: int | None, now_s: float
) -> list[int]:
    """Base offsets of the oldest sealed segments that the policy and the pins let go."""
    total_bytes = sum(s.size_bytes for s in segments)
    expired: list[int] = []
    for segment, following in itertools.pairwise(segments):
        if pinned_offset is not None and following.base_offset > pinned_offset:
            break
        too_big = policy.retention_bytes is not None and total_bytes > policy.retention_bytes
        too_old = (
            policy.retention_age_s is not None and segment.mtime_s < now_s - policy.retention_age_s
        )
        if not (too_big or too_old):
            break
        expired.append(segment.base_offset)
        total_bytes -= segment.size_bytes
    return expired


def describe_segments(directory: Path) -> list[SegmentInfo]:
    """Size and age of every segment in ``directory`` (blocking)."""
    infos = []
    for base in list_segments(directory):
        stat = segment_path(directory, base).stat()
        infos.append(SegmentInfo(base, stat.st_size, stat.st_mtime))
    return infos


def apply_retention(
    directory: Path, policy: RetentionPolicy, pinned_offset: int | None, now_s: float
) -> list[int]:
    """Delete what ``select_expired`` allows; return the deleted base offsets (blocking)."""
    if not policy.enabled:
        return []
    expired = select_expired(describe_segments(directory), policy, pinned_offset, now_s)
    for base in expired:
        remove_segment(directory, base)
    if expired:
        fsync_directory(directory)
        logger.info("retention deleted %d segment(s) of %s", len(expired), directory)
    return expired
