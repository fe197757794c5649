"""The FileLog's segment cursor over chunk boundaries: wherever a read of the file ends inside a
frame (its header included), the next read carries on, and the fast path that takes sound
frames gives exactly what the careful per-frame decoder gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from log.file import FileLog
from log.file.framing import frame_bytes
from log.file.reader import SegmentCursor
from log.position import Record


async def _write(directory: Path, count: int) -> list[tuple[str, bytes]]:
    records = [(f"key-{i % 3}", bytes([i % 251]) * (40 + i % 7)) for i in range(count)]
    async with await FileLog.open(directory, fsync="never") as log:
        await log.append_batch(records)
    return records


def _read_all(
    directory: Path, start: int | None, limit: int, chunk_bytes: int, max_records: int, tail: bool
) -> list[Record]:
    cursor = SegmentCursor(directory, start, chunk_bytes=chunk_bytes)
    out: list[Record] = []
    try:
        while batch := cursor.read(limit, max_records, tail):
            assert len(batch) <= max_records
            out.extend(batch)
    finally:
        cursor.close()
    return out


@pytest.mark.parametrize("tolerate_tail", [False, True])
async def test_every_chunk_boundary_reads_every_record(tmp_path: Path, tolerate_tail: bool) -> None:
    """Chunks ending at every byte of a frame (inside its 8-byte header too) lose nothing and
    raise nothing below the committed end."""
    written = await _write(tmp_path, 60)
    end = len(written)
    first = frame_bytes(written[0][0].encode(), written[0][1])
    for chunk_bytes in range(2 * first - 10, 2 * first + 30):
        for max_records in (1, 7, 1024):
            records = _read_all(tmp_path, None, end, chunk_bytes, max_records, tolerate_tail)
            assert [(r.key, r.payload) for r in records] == written, (chunk_bytes, max_records)
            assert [r.offset for r in records] == list(range(len(written)))


async def test_a_start_and_a_limit_inside_the_log(tmp_path: Path) -> None:
    """From a start offset up to a limit, whatever the chunk size."""
    written = await _write(tmp_path, 40)
    for chunk_bytes in (64, 100, 333, 1 << 20):
        records = _read_all(tmp_path, 11, 29, chunk_bytes, 5, False)
        assert [r.offset for r in records] == list(range(11, 29))
        assert [(r.key, r.payload) for r in records] == written[11:29]


async def test_seek_reads_on_as_a_new_cursor_would(tmp_path: Path) -> None:
    """After ``seek`` the cursor reads from that offset (in whichever segment holds it, before
    or after where it stood) exactly what a new cursor started there reads."""
    records = [("k", bytes([i]) * 50) for i in range(40)]
    async with await FileLog.open(tmp_path, fsync="never", segment_bytes=400) as log:
        await log.append_batch(records)
    cursor = SegmentCursor(tmp_path, None)
    try:
        assert [r.offset for r in cursor.read(None, 5, False)] == list(range(5))
        for offset in (31, 3, 17, 40):
            cursor.seek(offset)
            got = cursor.read(None, 1024, False)
            assert got == _read_all(tmp_path, offset, 40, 1 << 20, 1024, False)
            assert [r.offset for r in got] == list(range(offset, 40))
    finally:
        cursor.close()
