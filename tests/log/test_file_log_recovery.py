"""Recovery and corruption: torn tails at every byte, flipped bits in sealed and active parts."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from log import CorruptRecordError, Position
from log.file import FileLog
from log.file.segment import list_segments, segment_path
from tests.log.contract import read_all

PAYLOADS = [f"record-{i}".encode() * 3 for i in range(6)]


async def _write(directory: Path, payloads: list[bytes], **options: int) -> list[int]:
    """Append ``payloads`` one by one; return the active segment's size after each."""
    sizes = []
    async with await FileLog.open(directory, fsync="always", **options) as log:  # type: ignore[arg-type]  # only int options are passed
        for payload in payloads:
            await log.append("src", payload)
            sizes.append(segment_path(directory, list_segments(directory)[-1]).stat().st_size)
    return sizes


def _append_bytes(path: Path, data: bytes) -> None:
    with open(path, "ab") as out:
        out.write(data)


def _flip(path: Path, pos: int, mask: int = 0x10) -> None:
    data = bytearray(path.read_bytes())
    data[pos] ^= mask
    path.write_bytes(bytes(data))


async def test_torn_tail_at_every_byte_of_the_last_record(tmp_path: Path) -> None:
    """Cutting the last record at any byte: recovery truncates it, keeps the rest, and appends
    continue at its offset."""
    pristine = tmp_path / "pristine"
    sizes = await _write(pristine, PAYLOADS)
    start, stop = sizes[-2], sizes[-1]
    for cut in range(start, stop):
        directory = tmp_path / f"cut-{cut}"
        shutil.copytree(pristine, directory)
        os.truncate(segment_path(directory, 0), cut)
        async with await FileLog.open(directory, readonly=True) as reader:
            assert [r.payload for r in await read_all(reader)] == PAYLOADS[:-1]
        async with await FileLog.open(directory, fsync="always") as log:
            tail = log.recovered_tail
            assert (tail is None) == (cut == start)
            if tail is not None:
                assert (tail.valid_bytes, tail.truncated_bytes) == (start, cut - start)
            assert await log.end() == Position.of({0: len(PAYLOADS) - 1})
            assert await log.append("src", b"next") == Position.of({0: len(PAYLOADS) - 1})
        async with await FileLog.open(directory, readonly=True) as reader:
            assert [r.payload for r in await read_all(reader)] == [*PAYLOADS[:-1], b"next"]


@pytest.mark.parametrize("garbage", [b"\x00" * 7, b"\x00" * 4096, b"\xff" * 9, os.urandom(300)])
async def test_garbage_after_the_last_record_is_cut(tmp_path: Path, garbage: bytes) -> None:
    """Zeros or junk after the last good record (a crash mid-allocation) are cut on open."""
    await _write(tmp_path, PAYLOADS)
    path = segment_path(tmp_path, 0)
    good = path.stat().st_size
    _append_bytes(path, garbage)
    async with await FileLog.open(tmp_path) as log:
        assert log.recovered_tail is not None
        assert log.recovered_tail.valid_bytes == good
        assert [r.payload for r in await read_all(log)] == PAYLOADS


async def test_flipped_byte_anywhere_in_a_sealed_record(tmp_path: Path) -> None:
    """A flipped byte anywhere in a record of a sealed segment raises CorruptRecordError at that
    record, after every record before it was yielded."""
    pristine = tmp_path / "pristine"
    sizes = await _write(pristine, PAYLOADS * 3, segment_bytes=300)
    bases = list_segments(pristine)
    assert len(bases) >= 3
    first_segment_sizes = [s for s in sizes[: bases[1]]]
    frame_start, frame_end = first_segment_sizes[1], first_segment_sizes[2]
    for pos in range(frame_start, frame_end):
        directory = tmp_path / f"flip-{pos}"
        shutil.copytree(pristine, directory)
        _flip(segment_path(directory, 0), pos)
        async with await FileLog.open(directory) as log:
            assert log.recovered_tail is None
            seen = []
            with pytest.raises(CorruptRecordError) as info:
                async for record in log.read():
                    seen.append(record.offset)
            assert seen == [0, 1]
            assert (info.value.segment, info.value.offset) == (segment_path(directory, 0).name, 2)
            later = await read_all(log, Position.of({0: bases[1]}))
            assert later[0].offset == bases[1]


async def test_flipped_byte_in_the_middle_of_the_active_segment(tmp_path: Path) -> None:
    """Damage in the middle of the active segment is kept, not truncated: later records stay,
    readers raise at the damaged one, and appends continue at the right offset."""
    pristine = tmp_path / "pristine"
    sizes = await _write(pristine, PAYLOADS)
    for pos in range(sizes[1], sizes[2]):
        directory = tmp_path / f"flip-{pos}"
        shutil.copytree(pristine, directory)
        _flip(segment_path(directory, 0), pos)
        async with await FileLog.open(directory) as log:
            assert log.recovered_tail is None
            assert log.corrupt_offsets == [2]
            assert await log.append("src", b"next") == Position.of({0: len(PAYLOADS)})
            seen = []
            with pytest.raises(CorruptRecordError) as info:
                async for record in log.read():
                    seen.append(record.payload)
            assert seen == PAYLOADS[:2]
            assert info.value.offset == 2
            tail = await read_all(log, Position.of({0: 3}))
            assert [r.payload for r in tail] == [*PAYLOADS[3:], b"next"]


async def test_flipped_byte_in_the_last_record_is_a_torn_tail(tmp_path: Path) -> None:
    """Damage in the newest record cannot be told from a torn write: it is cut and reported."""
    sizes = await _write(tmp_path, PAYLOADS)
    _flip(segment_path(tmp_path, 0), sizes[-2] + 12)
    async with await FileLog.open(tmp_path) as log:
        assert log.recovered_tail is not None
        assert "crc32c" in log.recovered_tail.reason
        assert [r.payload for r in await read_all(log)] == PAYLOADS[:-1]


async def test_missing_records_between_segments_raise(tmp_path: Path) -> None:
    """A sealed segment that ends short of the next segment's base raises CorruptRecordError."""
    sizes = await _write(tmp_path, PAYLOADS * 3, segment_bytes=300)
    bases = list_segments(tmp_path)
    os.truncate(segment_path(tmp_path, 0), sizes[0])
    async with await FileLog.open(tmp_path) as log:
        seen = []
        with pytest.raises(CorruptRecordError) as info:
            async for record in log.read():
                seen.append(record.offset)
        assert seen == [0]
        assert info.value.offset == 1
        assert bases[1] > 1
