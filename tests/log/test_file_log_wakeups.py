"""How a following FileLog reader learns of new records: the writer's commit in its own process,
the directory watch (inotify) in another, polling where there is no watch."""

from __future__ import annotations

import select
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

import log.file.file_log as file_log_module
from log.file import FileLog
from log.file.group_commit import GroupCommitter
from log.file.reader import SegmentCursor
from log.file.watch import DirectoryWatch, open_watch
from log.position import Record

HANG_GUARD_S = 30.0
"""Not a timing: only turns a reader that never wakes into a failure instead of a hung run."""

needs_watch = pytest.mark.skipif(
    open_watch(Path(".")) is None, reason="no inotify here: readers poll"
)


def _readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


async def _next(records: AsyncIterator[Record]) -> Record:
    with anyio.fail_after(HANG_GUARD_S):
        return await anext(records)


async def test_in_process_reader_waits_for_the_commit_without_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower in the writer's process that has read everything committed waits for the
    next commit without another (empty) read of the segment, and takes the records of that
    commit from the writer's committed tail: the records before it started are the one read."""
    reads: list[int] = []
    real_read = SegmentCursor.read

    def counting_read(
        self: SegmentCursor, limit: int | None, max_records: int, tolerate_tail: bool
    ) -> list[Record]:
        found = real_read(self, limit, max_records, tolerate_tail)
        reads.append(len(found))
        return found

    waiting = anyio.Event()
    real_wait = GroupCommitter.wait_committed

    async def signalling_wait(self: GroupCommitter) -> None:
        waiting.set()
        await real_wait(self)

    monkeypatch.setattr(SegmentCursor, "read", counting_read)
    monkeypatch.setattr(GroupCommitter, "wait_committed", signalling_wait)
    send, receive = anyio.create_memory_object_stream[Record](10)

    async def follow(log: FileLog) -> None:
        async for record in log.read("beginning", follow=True):
            await send.send(record)

    async with await FileLog.open(tmp_path, fsync="batch") as log, anyio.create_task_group() as tg:
        await log.append_batch([("k", b"a"), ("k", b"b")])
        tg.start_soon(follow, log)
        with anyio.fail_after(HANG_GUARD_S):
            got = [(await receive.receive()).payload for _ in range(2)]
            for payload in (b"c", b"d"):
                await waiting.wait()  # the reader has caught up and waits for a commit
                waiting = anyio.Event()
                await log.append("k", payload)
                got.append((await receive.receive()).payload)
            await waiting.wait()
        tg.cancel_scope.cancel()
    assert got == [b"a", b"b", b"c", b"d"]
    assert reads == [2]


@needs_watch
def test_directory_watch_reports_writes_and_new_files(tmp_path: Path) -> None:
    """The watch becomes readable when a file of the directory is written or created, and
    draining it clears what was reported."""
    watch = open_watch(tmp_path)
    assert watch is not None
    try:
        assert not _readable(watch.fileno())
        (tmp_path / "segment").write_bytes(b"frame")  # a new file, written
        assert _readable(watch.fileno())
        watch.drain()
        assert not _readable(watch.fileno())
        with (tmp_path / "segment").open("ab") as segment:
            segment.write(b"more")
        assert _readable(watch.fileno())
        watch.drain()
        assert not _readable(watch.fileno())
    finally:
        watch.close()
        watch.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        watch.fileno()


@needs_watch
async def test_readonly_reader_is_woken_by_the_write_not_its_poll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A readonly follower whose polls would each wait a minute still gets records as they
    are written: the directory watch wakes it (here every poll would outlast the guard)."""
    monkeypatch.setattr(file_log_module, "_FIRST_POLL_S", 60.0)
    async with (
        await FileLog.open(tmp_path, fsync="batch") as writer,
        await FileLog.open(tmp_path, readonly=True, poll_interval_s=60.0) as reader,
    ):
        records = reader.read("beginning", follow=True)
        try:
            for payload in (b"first", b"second", b"third"):
                await writer.append("k", payload)
                assert (await _next(records)).payload == payload
        finally:
            await records.aclose()


async def test_readonly_reader_polls_where_there_is_no_watch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a directory watch (no inotify, or none to be had) a readonly follower polls and
    still sees every record, across a segment roll."""
    monkeypatch.setattr(file_log_module, "open_watch", lambda directory: None)
    async with (
        await FileLog.open(tmp_path, fsync="batch", segment_bytes=256) as writer,
        await FileLog.open(tmp_path, readonly=True, poll_interval_s=0.005) as reader,
    ):
        records = reader.read("beginning", follow=True)
        try:
            for i in range(20):
                payload = f"record {i}".encode() * 4
                await writer.append("k", payload)
                record = await _next(records)
                assert (record.offset, record.payload) == (i, payload)
        finally:
            await records.aclose()


@needs_watch
async def test_a_finished_read_releases_its_watch(tmp_path: Path) -> None:
    """A following read that ends (here: the consumer stops) releases its watch descriptor."""
    opened: list[DirectoryWatch] = []
    real_open = file_log_module.open_watch

    def tracking_open(directory: Path) -> DirectoryWatch | None:
        watch = real_open(directory)
        if watch is not None:
            opened.append(watch)
        return watch

    async with await FileLog.open(tmp_path) as writer:
        await writer.append("k", b"v")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(file_log_module, "open_watch", tracking_open)
        async with await FileLog.open(tmp_path, readonly=True) as reader:
            records = reader.read("beginning", follow=True)
            assert (await _next(records)).payload == b"v"
            await records.aclose()
    assert len(opened) == 1
    with pytest.raises(ValueError, match="closed"):
        opened[0].fileno()
