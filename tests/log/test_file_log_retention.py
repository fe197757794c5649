"""Retention by size and age never deletes at or past a pinned position."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from log import ConfigError, Position
from log.file import FileLog
from log.file.retention import RetentionPolicy, SegmentInfo, select_expired
from log.file.segment import list_segments, segment_path
from tests.log.contract import read_all


async def _fill(log: FileLog, count: int) -> None:
    for i in range(count):
        await log.append("k", bytes(60) + i.to_bytes(4, "big"))


async def test_size_retention_keeps_pinned_records(tmp_path: Path) -> None:
    """With a pin, size retention deletes only segments wholly before the pinned offset."""
    async with await FileLog.open(tmp_path, segment_bytes=400, retention_bytes=1) as log:
        await log.pin("snapshot", Position.of({0: 10}))
        await _fill(log, 60)
        await log.apply_retention()
        bases = list_segments(tmp_path)
        assert bases[0] <= 10
        assert bases[0] > 0
        records = await read_all(log, Position.of({0: 10}))
        assert [r.offset for r in records] == list(range(10, 60))


async def test_unpinning_lets_retention_proceed(tmp_path: Path) -> None:
    """Removing the pin lets retention delete down to the active segment."""
    async with await FileLog.open(tmp_path, segment_bytes=400, retention_bytes=1) as log:
        await log.pin("snapshot", Position.of({0: 0}))
        await _fill(log, 40)
        assert list_segments(tmp_path)[0] == 0
        await log.pin("snapshot", None)
        deleted = await log.apply_retention()
        assert deleted
        assert list_segments(tmp_path) == [list_segments(tmp_path)[-1]]
        assert (await read_all(log))[-1].offset == 39


async def test_pins_from_a_reader_process_bind_the_writer(tmp_path: Path) -> None:
    """A pin set through a readonly log (another follower) protects records from the writer's
    retention, and survives reopening."""
    async with await FileLog.open(tmp_path, segment_bytes=400) as writer:
        await _fill(writer, 5)
        async with await FileLog.open(tmp_path, readonly=True) as reader:
            await reader.pin("follower-1", Position.of({0: 3}))
        await _fill(writer, 40)
    async with await FileLog.open(tmp_path, segment_bytes=400, retention_bytes=1) as writer:
        assert list_segments(tmp_path)[0] <= 3
        assert (await read_all(writer, Position.of({0: 3})))[0].offset == 3


async def test_age_retention_deletes_old_sealed_segments(tmp_path: Path) -> None:
    """Segments last written longer ago than retention_age_s go; newer ones and the active
    one stay."""
    async with await FileLog.open(tmp_path, segment_bytes=400) as log:
        await _fill(log, 40)
    bases = list_segments(tmp_path)
    old = time.time() - 3600
    for base in bases[:3]:
        os.utime(segment_path(tmp_path, base), (old, old))
    async with await FileLog.open(tmp_path, segment_bytes=400, retention_age_s=600) as log:
        assert list_segments(tmp_path) == bases[3:]
        assert (await read_all(log))[0].offset == bases[3]


async def test_active_segment_is_never_deleted(tmp_path: Path) -> None:
    """Even with a zero budget and no pins, the active segment and its records stay."""
    async with await FileLog.open(tmp_path, retention_bytes=0, retention_age_s=0) as log:
        await _fill(log, 3)
        await log.apply_retention()
        assert [r.offset for r in await read_all(log)] == [0, 1, 2]


def test_select_expired_stops_at_pins_and_limits() -> None:
    """The policy deletes only an oldest-first prefix within its limits and before the pin."""
    segments = [
        SegmentInfo(base, 100, mtime) for base, mtime in [(0, 1), (10, 2), (20, 3), (30, 4)]
    ]
    by_size = RetentionPolicy(retention_bytes=250)
    assert select_expired(segments, by_size, None, now_s=10) == [0, 10]
    assert select_expired(segments, by_size, pinned_offset=15, now_s=10) == [0]
    assert select_expired(segments, by_size, pinned_offset=10, now_s=10) == [0]
    assert select_expired(segments, by_size, pinned_offset=9, now_s=10) == []
    by_age = RetentionPolicy(retention_age_s=7.5)
    assert select_expired(segments, by_age, None, now_s=10) == [0, 10]
    assert select_expired(segments, RetentionPolicy(), None, now_s=10) == []


async def test_any_pin_name_is_one_plain_file(tmp_path: Path) -> None:
    """Pin names with slashes, dots or colons stay inside the pins folder; empty ones are
    refused with ConfigError."""
    async with await FileLog.open(tmp_path) as log:
        for name in ("../escape", "a/b", ".hidden", "snapshot:worker-0", ".."):
            await log.pin(name, Position.of({0: 0}))
        assert len(os.listdir(tmp_path / "pins")) == 5
        assert set(os.listdir(tmp_path)) >= {"pins", "LOCK"}
        with pytest.raises(ConfigError):
            await log.pin("", Position.of({0: 0}))
