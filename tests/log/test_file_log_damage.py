"""Damage in a FileLog is never read as its end: real damaged files, read as readers do.

A length field gone bad, a zeroed header, a segment deleted with its index left behind: each
raises a typed error naming the segment file and byte position after every good record before
it, for readonly readers (another process than the writer's) and for the writer's own reads.
A torn tail at the very end of the newest segment (an append in progress, or one a crash cut
short) is not damage: readers stop before it and see the record once it is whole, and
``torn_tail`` reports it.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from log.errors import CorruptRecordError, MissingSegmentError, NotALogError
from log.file import FileLog
from log.file.framing import FRAME_HEADER, decode_frame, encode_frame
from log.file.framing import MAX_BODY_BYTES as MAX_BODY
from tests.log.contract import read_all, read_n

GARBAGE_LENGTH = 0xDEADBEEF


async def _write(directory: Path, count: int, **options: object) -> None:
    async with await FileLog.open(directory, fsync="never", **options) as log:  # type: ignore[arg-type]
        await log.append_batch([(f"k{i}", f"payload-{i}".encode() * 3) for i in range(count)])


def _frames(segment: Path) -> list[tuple[int, int]]:
    """(byte position, offset) of each frame of a sound segment."""
    data, pos, found = segment.read_bytes(), 0, []
    while pos < len(data):
        frame = decode_frame(data, pos, MAX_BODY)
        found.append((pos, frame.offset))
        pos = frame.end_pos
    return found


def _segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def _index_stems(directory: Path) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.idx"))


def _poke_length(segment: Path, position: int, length: int) -> None:
    data = bytearray(segment.read_bytes())
    struct.pack_into("<I", data, position, length)
    segment.write_bytes(bytes(data))


async def _read_readonly(directory: Path) -> list[int]:
    async with await FileLog.open(directory, readonly=True) as reader:
        return [record.offset for record in await read_all(reader)]


@pytest.mark.parametrize("length", [GARBAGE_LENGTH, 0, 3], ids=["huge", "zero", "tiny"])
async def test_a_bad_length_in_the_middle_raises_naming_segment_and_byte(
    tmp_path: Path, length: int
) -> None:
    """A length field gone bad with records after it: readers get the records before it, then
    CorruptRecordError naming the segment file and the frame's byte position; never a short
    log that ends there."""
    await _write(tmp_path, 10)
    (segment,) = _segments(tmp_path)
    position, offset = _frames(segment)[3]
    _poke_length(segment, position, length)
    async with await FileLog.open(tmp_path, readonly=True) as reader:
        got: list[int] = []
        with pytest.raises(CorruptRecordError) as info:
            async for record in reader.read():
                got.append(record.offset)
        assert got == [0, 1, 2]
        assert (await reader.end()).get(0) == 10
    assert info.value.segment == segment.name
    assert (info.value.offset, info.value.byte_position) == (offset, position)
    assert segment.name in str(info.value) and f"byte {position}" in str(info.value)


async def test_a_bad_length_followed_by_data_past_a_read_chunk(tmp_path: Path) -> None:
    """The records after the damage lie beyond the reader's first chunk (1 MiB): still an
    error, for a reader from the beginning and for the log's end."""
    async with await FileLog.open(tmp_path, fsync="never") as log:
        await log.append_batch([("k", bytes(4096)) for _ in range(400)])
    (segment,) = _segments(tmp_path)
    position, _ = _frames(segment)[1]
    _poke_length(segment, position, GARBAGE_LENGTH)
    with pytest.raises(CorruptRecordError):
        await _read_readonly(tmp_path)


async def test_a_bad_length_in_a_sealed_segment(tmp_path: Path) -> None:
    """In a segment a later one follows, a bad length is damage even with nothing after it in
    the file."""
    await _write(tmp_path, 12, segment_bytes=200)
    segments = _segments(tmp_path)
    assert len(segments) > 2
    position, offset = _frames(segments[1])[-1]
    _poke_length(segments[1], position, GARBAGE_LENGTH)
    with pytest.raises(CorruptRecordError) as info:
        await _read_readonly(tmp_path)
    assert info.value.segment == segments[1].name and info.value.offset == offset


async def test_the_writer_keeps_damage_in_place_and_its_reads_raise(tmp_path: Path) -> None:
    """Reopened for writing, the log keeps the damaged record (recovery reports it) and reads
    through the writer raise there too."""
    await _write(tmp_path, 10)
    (segment,) = _segments(tmp_path)
    _poke_length(segment, _frames(segment)[4][0], GARBAGE_LENGTH)
    async with await FileLog.open(tmp_path) as log:
        assert log.corrupt_offsets == [4]
        assert log.recovered_tail is None
        with pytest.raises(CorruptRecordError):
            await read_all(log)


async def test_a_torn_tail_is_not_damage_and_is_reported(tmp_path: Path) -> None:
    """Half a record at the very end (no writer holds the log): readers stop before it without
    an error, ``torn_tail`` says where and how much, and a writer's recovery cuts it."""
    await _write(tmp_path, 5)
    (segment,) = _segments(tmp_path)
    whole = segment.stat().st_size
    frame = encode_frame(5, 1.0, b"k5", b"x" * 100)
    with segment.open("ab") as out:
        out.write(frame[:40])
    assert await _read_readonly(tmp_path) == [0, 1, 2, 3, 4]
    async with await FileLog.open(tmp_path, readonly=True) as reader:
        tail, writer_live = await reader.torn_tail()
    assert tail is not None and not writer_live
    assert (tail.segment, tail.byte_position, tail.size_bytes, tail.offset) == (
        segment.name,
        whole,
        40,
        5,
    )
    async with await FileLog.open(tmp_path) as log:
        assert log.recovered_tail is not None and log.recovered_tail.truncated_bytes == 40
    async with await FileLog.open(tmp_path, readonly=True) as reader:
        assert await reader.torn_tail() == (None, None)


async def test_a_bad_length_in_the_last_record_reads_as_a_torn_tail(tmp_path: Path) -> None:
    """With nothing after it, a bad length cannot be told from an append cut short: the log
    ends before it (as the writer's recovery will cut it), and ``torn_tail`` reports it."""
    await _write(tmp_path, 6)
    (segment,) = _segments(tmp_path)
    position, _ = _frames(segment)[-1]
    _poke_length(segment, position, GARBAGE_LENGTH)
    assert await _read_readonly(tmp_path) == [0, 1, 2, 3, 4]
    async with await FileLog.open(tmp_path, readonly=True) as reader:
        tail, _ = await reader.torn_tail()
    assert tail is not None and tail.byte_position == position


async def test_an_append_in_progress_is_waited_for(tmp_path: Path) -> None:
    """A follower at the live end that sees a record's first bytes (the writer is mid-write)
    waits, then reads the record whole once the rest is there: no error."""
    await _write(tmp_path, 3)
    (segment,) = _segments(tmp_path)
    frame = encode_frame(3, 1.0, b"k3", b"y" * 300)
    whole = segment.stat().st_size
    async with await FileLog.open(tmp_path, readonly=True, poll_interval_s=0.01) as reader:
        for cut in (3, FRAME_HEADER.size, 100):
            with segment.open("r+b") as out:
                out.truncate(whole)
                out.seek(whole)
                out.write(frame[:cut])
            assert [r.offset for r in await read_all(reader)] == [0, 1, 2]
        with segment.open("ab") as out:
            out.write(frame[100:])
        records = await read_n(reader, 4)
    assert records[-1].offset == 3 and records[-1].payload == b"y" * 300


@pytest.mark.parametrize("which", ["only", "first", "middle", "newest"])
async def test_a_deleted_segment_whose_index_remains_raises(tmp_path: Path, which: str) -> None:
    """A segment file gone while its index file remains is a MissingSegmentError naming it,
    after the records before it; never an empty or short log."""
    if which == "only":
        await _write(tmp_path, 4)
    else:
        await _write(tmp_path, 12, segment_bytes=200)
    segments = _segments(tmp_path)
    victim = {"only": 0, "first": 0, "middle": 1, "newest": -1}[which]
    gone = segments[victim]
    assert gone.with_suffix(".idx").exists()
    before = [o for s in segments[: victim if victim >= 0 else len(segments) - 1]
              for _, o in _frames(s)]  # fmt: skip
    gone.unlink()
    async with await FileLog.open(tmp_path, readonly=True) as reader:
        got: list[int] = []
        with pytest.raises(MissingSegmentError) as info:
            async for record in reader.read():
                got.append(record.offset)
    assert got == before
    assert info.value.segment == gone.name
    assert gone.with_suffix(".idx").name in str(info.value)


async def test_retention_leaves_no_index_behind(tmp_path: Path) -> None:
    """Segments retention deletes take their index with them: the log reads on from where it
    starts now, without a missing-segment error."""
    async with await FileLog.open(tmp_path, segment_bytes=200, retention_bytes=300) as log:
        await log.append_batch([(f"k{i}", b"p" * 40) for i in range(30)])
        assert await log.apply_retention() or len(_segments(tmp_path)) < 10
    assert _index_stems(tmp_path) == [p.stem for p in _segments(tmp_path)]
    offsets = await _read_readonly(tmp_path)
    assert offsets and offsets == list(range(offsets[0], 30))


async def test_readers_refuse_paths_that_hold_no_log(tmp_path: Path) -> None:
    """A missing directory (unless create=True), a file, and a directory of other things are
    NotALogError naming the path; an empty directory is a log not written yet."""
    missing = tmp_path / "typo"
    with pytest.raises(NotALogError) as info:
        await FileLog.open(missing, readonly=True)
    assert str(missing) in str(info.value) and info.value.path == str(missing)
    assert not missing.exists()
    async with await FileLog.open(missing, readonly=True, create=True) as reader:
        assert await read_all(reader) == []
    assert missing.is_dir()
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(NotALogError, match="not a directory"):
        await FileLog.open(tmp_path / "a-file", readonly=True)
    other = tmp_path / "snapshots"
    other.mkdir()
    (other / "snapshot-000001.snap").write_bytes(b"x")
    with pytest.raises(NotALogError, match=r"snapshot-000001\.snap"):
        await FileLog.open(other, readonly=True)
    with pytest.raises(NotALogError):
        await FileLog.open(tmp_path / "nowhere", create=False)


async def test_a_writer_refuses_a_log_whose_newest_segment_is_missing(tmp_path: Path) -> None:
    """Appending after a lost newest segment would give its offsets to new records: the writer
    refuses to open, naming the segment; once the stale index goes (the loss accepted), it
    opens and appends after what is left."""
    await _write(tmp_path, 12, segment_bytes=200)
    newest = _segments(tmp_path)[-1]
    newest.unlink()
    with pytest.raises(MissingSegmentError) as info:
        await FileLog.open(tmp_path)
    assert info.value.segment == newest.name
    newest.with_suffix(".idx").unlink()
    async with await FileLog.open(tmp_path) as log:
        assert (await log.end()).get(0) == int(newest.stem)
