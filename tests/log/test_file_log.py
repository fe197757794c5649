"""FileLog behaviour beyond the shared contract: reopen, segments, options, lock, retention."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from log import ConfigError, LogLockedError, LogWriteError, Position, open_log
from log.errors import NotALogError
from log.file import FileLog
from log.file.segment import list_segments, segment_path
from tests.log.contract import read_all


async def test_append_read_reopen_continues_offsets(tmp_path: Path) -> None:
    """Records survive reopen and new appends continue at the next offset."""
    async with await FileLog.open(tmp_path, fsync="always") as log:
        await log.append_batch([("k", f"{i}".encode()) for i in range(5)])
    async with await FileLog.open(tmp_path, fsync="always") as log:
        assert log.recovered_tail is None
        assert await log.end() == Position.of({0: 5})
        assert await log.append("k", b"5") == Position.of({0: 5})
        records = await read_all(log)
    assert [(r.offset, r.payload) for r in records] == [(i, f"{i}".encode()) for i in range(6)]


async def test_segments_roll_and_are_named_by_base_offset(tmp_path: Path) -> None:
    """Small segments roll; each file is named by the offset of its first record."""
    async with await FileLog.open(tmp_path, segment_bytes=300) as log:
        for i in range(20):
            await log.append("k", bytes(40) + bytes([i]))
        bases = list_segments(tmp_path)
        assert len(bases) > 3
        records = await read_all(log)
    by_offset = {r.offset: r for r in records}
    for base in bases:
        assert base in by_offset
    assert [r.payload[-1] for r in records] == list(range(20))


async def test_read_from_every_position_uses_index(tmp_path: Path) -> None:
    """Reads starting at any offset, across segments and index entries, start exactly there."""
    async with await FileLog.open(tmp_path, segment_bytes=2000, index_interval_bytes=64) as log:
        await log.append_batch([("k", f"{i:04d}".encode() * 10) for i in range(120)])
    async with await FileLog.open(tmp_path, readonly=True) as reader:
        for start in (0, 1, 17, 59, 60, 61, 119, 120, 500):
            records = await read_all(reader, Position.of({0: start}))
            assert [r.offset for r in records] == list(range(start, 120))


async def test_corrupt_index_is_only_a_hint(tmp_path: Path) -> None:
    """A garbage index file never changes what a read returns."""
    async with await FileLog.open(tmp_path, index_interval_bytes=32) as log:
        await log.append_batch([("k", bytes([i]) * 20) for i in range(50)])
    (tmp_path / "00000000000000000000.idx").write_bytes(os.urandom(64))
    async with await FileLog.open(tmp_path, readonly=True) as reader:
        records = await read_all(reader, Position.of({0: 30}))
    assert [r.offset for r in records] == list(range(30, 50))


async def test_second_writer_in_process_is_refused(tmp_path: Path) -> None:
    """A second writer on the same directory gets LogLockedError; a reader is allowed."""
    async with await FileLog.open(tmp_path) as writer:
        await writer.append("k", b"x")
        with pytest.raises(LogLockedError) as info:
            await FileLog.open(tmp_path)
        assert f"pid {os.getpid()}" in str(info.value)
        async with await FileLog.open(tmp_path, readonly=True) as reader:
            assert [r.payload for r in await read_all(reader)] == [b"x"]
    async with await FileLog.open(tmp_path) as again:
        assert (await again.end()).get(0) == 1


async def test_readonly_log_refuses_appends(tmp_path: Path) -> None:
    """A readonly log raises a non-retriable LogWriteError on append."""
    async with await FileLog.open(tmp_path):
        pass
    async with await FileLog.open(tmp_path, readonly=True) as reader:
        with pytest.raises(LogWriteError) as info:
            await reader.append("k", b"x")
        assert not info.value.retriable


async def test_readonly_needs_an_existing_directory(tmp_path: Path) -> None:
    """Opening a missing directory readonly is a NotALogError naming the path."""
    with pytest.raises(NotALogError) as info:
        await FileLog.open(tmp_path / "missing", readonly=True)
    assert info.value.path == str(tmp_path / "missing")


@pytest.mark.parametrize(
    ("query", "what"),
    [
        ("fsync=sometimes", "fsync"),
        ("segment_bytes=ten", "segment_bytes"),
        ("segment_bytes=1", "segment_bytes"),
        ("batch_max_delay_s=-1", "batch_max_delay_s"),
        ("batch_max_records=0", "batch_max_records"),
        ("readonly=maybe", "readonly"),
        ("retention_bytes=-5", "retention_bytes"),
        ("colour=blue", "colour"),
    ],
)
async def test_bad_url_options_name_the_option(tmp_path: Path, query: str, what: str) -> None:
    """Unknown options and bad values raise ConfigError naming the option."""
    with pytest.raises(ConfigError) as info:
        await open_log(f"file://{tmp_path}?{query}")
    assert info.value.what == what
    assert not os.listdir(tmp_path)


async def test_url_with_a_host_is_refused(tmp_path: Path) -> None:
    """file:// URLs with a remote host are refused; localhost is accepted."""
    with pytest.raises(ConfigError):
        await open_log(f"file://elsewhere{tmp_path}")
    async with await open_log(f"file://localhost{tmp_path}", fsync="never") as log:
        assert log.url.startswith("file:///")


async def test_url_options_and_keywords(tmp_path: Path) -> None:
    """Query options and keyword options both configure the log; the URL reopens it."""
    log = await open_log(f"file://{tmp_path}?fsync=always", segment_bytes=1024)
    assert isinstance(log, FileLog)
    async with log:
        assert (log.config.fsync, log.config.segment_bytes) == ("always", 1024)
        await log.append("k", b"v")
        url = log.url
    async with await open_log(url) as again:
        assert [r.payload for r in await read_all(again)] == [b"v"]


async def test_oversized_and_mistyped_records_are_refused(tmp_path: Path) -> None:
    """Records over max_record_bytes or with the wrong types are refused before anything is
    written."""
    async with await FileLog.open(tmp_path, max_record_bytes=100) as log:
        with pytest.raises(LogWriteError, match="max_record_bytes"):
            await log.append("k", bytes(200))
        with pytest.raises(TypeError):
            await log.append("k", "text")  # type: ignore[arg-type]  # the wrong type on purpose
        with pytest.raises(LogWriteError):
            await log.append_batch([("k", b"ok"), ("k", bytes(200))])
        assert await read_all(log) == []
        assert await log.append("k", b"ok") == Position.of({0: 0})


async def test_start_before_retained_data_is_an_error(tmp_path: Path) -> None:
    """Reading from an offset retention already deleted raises ConfigError naming start."""
    async with await FileLog.open(tmp_path, segment_bytes=200, retention_bytes=0) as log:
        for i in range(20):
            await log.append("k", bytes(50) + bytes([i]))
        first = list_segments(tmp_path)[0]
        assert first > 0
        with pytest.raises(ConfigError) as info:
            await read_all(log, Position.of({0: 0}))
        assert info.value.what == "start"
        records = await read_all(log)
        assert records[0].offset == first


async def test_empty_last_segment_after_roll_crash(tmp_path: Path) -> None:
    """An empty newest segment (crash right after a roll) is dropped on open."""
    async with await FileLog.open(tmp_path) as log:
        await log.append_batch([("k", b"a"), ("k", b"b")])
    segment_path(tmp_path, 2).touch()
    async with await FileLog.open(tmp_path) as log:
        assert (await log.end()).get(0) == 2
        await log.append("k", b"c")
        assert [r.payload for r in await read_all(log)] == [b"a", b"b", b"c"]
