"""The committed tail: a reader in the writer's process takes the records of the latest commits
from memory instead of reading back the segment file. The file stays the reference: every
record from memory must equal the one a file read returns, and nothing reaches memory before
it is durable."""

from __future__ import annotations

import errno
import os
import random
from collections.abc import AsyncGenerator
from pathlib import Path

import anyio
import pytest

import log.file.segment as segment_module
from log import LogClosedError, LogDiskFullError, LogWriteError, Position
from log.file import FileLog
from log.file.group_commit import CommitLimits, GroupCommitter
from log.file.reader import SegmentCursor
from log.file.segment import SegmentWriter, list_segments
from log.file.tail import CommittedTail
from log.position import Record
from tests.faults.disk import ByteBudgetOS

HANG_GUARD_S = 30.0
"""Not a timing: only turns a reader that never wakes into a failure instead of a hung run."""


class FileReads:
    """Counts the segment-file reads (``SegmentCursor.read`` calls) of every reader."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real_read = SegmentCursor.read

        def counting_read(
            cursor: SegmentCursor, limit: int | None, max_records: int, tolerate_tail: bool
        ) -> list[Record]:
            self.count += 1
            return real_read(cursor, limit, max_records, tolerate_tail)

        monkeypatch.setattr(SegmentCursor, "read", counting_read)


def _record(offset: int, payload: bytes, key: str = "k", timestamp: float = 1.5) -> Record:
    return Record(0, offset, key, payload, timestamp)


async def _file_records(directory: Path) -> list[Record]:
    """Everything in the log, read from the files by a readonly log (as another process)."""
    async with await FileLog.open(directory, readonly=True) as reader:
        return [record async for record in reader.read("beginning")]


async def _take(polls: AsyncGenerator[list[Record], None], count: int) -> list[Record]:
    got: list[Record] = []
    with anyio.fail_after(HANG_GUARD_S):
        while len(got) < count:
            got += await anext(polls)
    return got


def _random_records(rng: random.Random, count: int) -> list[tuple[str, bytes]]:
    keys = ["k", "", "sglang-0", "ключ-ü", "\U0001f600" * 3]
    return [
        (rng.choice(keys), rng.randbytes(rng.choice([0, 1, 7, 100, 3000]))) for _ in range(count)
    ]


# --- the tail on its own ---------------------------------------------------------------------


def test_take_hands_out_held_records_below_the_limit() -> None:
    """``take`` returns records from the offset on, at most ``max_records`` and below
    ``limit``; nothing for an offset it does not hold."""
    tail = CommittedTail(5)
    tail.add([_record(5, b"a"), _record(6, b"b"), _record(7, b"c")])
    assert (tail.start, tail.end) == (5, 8)
    assert [r.offset for r in tail.take(5, 8, 10)] == [5, 6, 7]
    assert [r.offset for r in tail.take(6, 8, 1)] == [6]
    assert [r.offset for r in tail.take(5, 7, 10)] == [5, 6]
    assert tail.take(4, 8, 10) == []
    assert tail.take(8, 9, 10) == []
    assert tail.take(5, 3, 10) == [], "a limit before the offset hands out nothing"
    assert tail.take(6, 6, 10) == []


def test_a_commit_that_does_not_follow_starts_the_tail_over() -> None:
    """The tail holds one contiguous run: records that do not follow its end replace it."""
    tail = CommittedTail(0)
    tail.add([_record(0, b"a")])
    tail.add([_record(3, b"d")])
    assert (tail.start, tail.end) == (3, 4)
    assert tail.take(0, 4, 10) == []


def test_the_caps_bound_what_the_tail_keeps() -> None:
    """Past either cap the oldest records go (down to half of each cap); a commit bigger than
    a cap is not kept at all."""
    tail = CommittedTail(0, max_records=4, max_bytes=1000)
    for offset in range(9):
        tail.add([_record(offset, b"x")])
    assert (tail.start, tail.end) == (6, 9)  # trimmed to 2 records at 5 and again at 8
    tail.add([_record(9, bytes(600))])
    tail.add([_record(10, bytes(400))])
    assert (tail.start, tail.end) == (10, 11)  # 5 records, 1008 bytes: trimmed to <= 500 bytes
    tail.add([_record(11 + i, b"y") for i in range(5)])
    assert (tail.start, tail.end) == (16, 16)  # 5 records > 4: not kept
    tail.add([_record(16, bytes(1001))])
    assert (tail.start, tail.end) == (17, 17)


class _Writes:
    def __init__(self) -> None:
        self.fail = False

    def __call__(self, frames: list[bytes], first_offset: int) -> None:
        if self.fail:
            raise OSError(errno.EIO, "fdatasync failed")


async def test_committer_keeps_records_only_for_registered_readers_and_after_the_write() -> None:
    """The committer fills the tail only while a reader is registered, with the records as a
    file read would return them, and never with the records of a failed write."""
    write = _Writes()
    committer = GroupCommitter(0, write, CommitLimits(100, 100, 0.0))
    await committer.append([(b"k", b"unseen")])
    assert (committer.tail.start, committer.tail.end) == (1, 1)
    committer.tail.readers = 1
    await committer.append([(b"k", b"a"), ("ü".encode(), b"")])
    held = committer.tail.take(1, 3, 10)
    assert [(r.partition, r.offset, r.key, r.payload) for r in held] == [
        (0, 1, "k", b"a"),
        (0, 2, "ü", b""),
    ]
    assert held[0].timestamp == held[1].timestamp > 0
    write.fail = True
    with pytest.raises(LogWriteError):
        await committer.append([(b"k", b"lost")])
    assert (committer.tail.start, committer.tail.end, committer.committed_end) == (1, 3, 3)


# --- FileLog readers ---------------------------------------------------------------------


async def test_records_from_the_tail_equal_the_file_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower in the writer's process gets, from memory, exactly the records (offsets,
    keys, payloads, timestamps) a reader of the files gets: a differential test over random
    commits of random keys and payloads."""
    reads = FileReads(monkeypatch)
    rng = random.Random(9)
    async with await FileLog.open(tmp_path, fsync="batch", segment_bytes=20_000) as log:
        polls = log.read_batches("beginning", follow=True)
        await log.append("k", b"first")
        followed = await _take(polls, 1)  # the one file read: "beginning" is no offset yet
        total = 1
        for _ in range(60):
            batch = _random_records(rng, rng.choice([1, 1, 2, 5, 20]))
            if len(batch) == 1:
                await log.append(*batch[0])
            else:
                await log.append_batch(batch)
            total += len(batch)
            followed += await _take(polls, total - len(followed))
        await polls.aclose()
        assert reads.count == 1
        assert len(list_segments(tmp_path)) > 1
    from_files = await _file_records(tmp_path)
    assert followed == from_files
    assert [r.offset for r in followed] == list(range(total))
    assert all(type(r.payload) is bytes and type(r.key) is str for r in followed)


async def test_a_reader_behind_the_tail_reads_the_files_then_the_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records committed before any reader was registered, and records pushed out of the tail
    by a commit too big to keep, come from the files (the reader's file cursor moving on from
    where memory left it, across segment rolls); what follows comes from memory again."""
    reads = FileReads(monkeypatch)
    async with await FileLog.open(tmp_path, fsync="never", segment_bytes=4096) as log:
        await log.append_batch([("k", b"early-%d" % i) for i in range(10)])
        polls = log.read_batches(Position.of({0: 3}), follow=True)
        got = await _take(polls, 7)  # from the files (nothing was kept without a reader)
        assert reads.count == 1
        await log.append("k", b"kept")
        got += await _take(polls, 1)
        assert reads.count == 1  # from the tail
        await log.append("k", b"not taken yet")
        await log.append_batch([("k", b"big-%d" % i) for i in range(1500)])  # over the cap
        got += await _take(polls, 1501)
        assert reads.count > 1  # the files again, from the offset memory had reached
        before = reads.count
        await log.append_batch([("k", b"after")])
        got += await _take(polls, 1)
        assert reads.count == before
        await polls.aclose()
        assert len(list_segments(tmp_path)) > 3
    from_files = await _file_records(tmp_path)
    assert got == from_files[3:]


async def test_a_tail_across_a_segment_roll_matches_the_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commits that roll the segment (one of them over several segments) are served from
    memory like any other, and equal what the files hold on both sides of each roll."""
    reads = FileReads(monkeypatch)
    async with await FileLog.open(tmp_path, fsync="batch", segment_bytes=256) as log:
        await log.append("k", b"0")
        polls = log.read_batches("beginning", follow=True)
        got = await _take(polls, 1)
        await log.append_batch([("k", bytes([i]) * 90) for i in range(7)])  # several rolls
        got += await _take(polls, 7)
        for i in range(5):
            await log.append("k", bytes([i]) * 100)
            got += await _take(polls, 1)
        await polls.aclose()
        assert reads.count == 1
        assert len(list_segments(tmp_path)) > 5
    assert got == await _file_records(tmp_path)


async def test_closing_the_log_wakes_a_reader_waiting_at_the_tail(tmp_path: Path) -> None:
    """A follower that took the last commit from memory and waits for the next one wakes with
    ``LogClosedError`` when the log closes."""
    log = await FileLog.open(tmp_path, fsync="batch")
    waiting = anyio.Event()
    outcome: list[BaseException] = []

    async def follow() -> None:
        try:
            async for _records in log.read_batches(Position.of({0: 0}), follow=True):
                waiting.set()
        except LogClosedError as exc:
            outcome.append(exc)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            await anyio.wait_all_tasks_blocked()
            await log.append("k", b"v")
            with anyio.fail_after(HANG_GUARD_S):
                await waiting.wait()
            await anyio.wait_all_tasks_blocked()
            await log.close()
    finally:
        await log.close()
    assert len(outcome) == 1


async def test_a_failed_fdatasync_never_reaches_an_in_process_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records whose fdatasync failed were written to the file but never committed: the
    in-process follower waiting at the tail never gets them, and neither does a new read."""
    got: list[Record] = []
    async with await FileLog.open(tmp_path, fsync="batch") as log:
        async with anyio.create_task_group() as tg:

            async def follow() -> None:
                async for records in log.read_batches(Position.of({0: 0}), follow=True):
                    got.extend(records)

            tg.start_soon(follow)
            await anyio.wait_all_tasks_blocked()
            await log.append("k", b"durable")
            await anyio.wait_all_tasks_blocked()
            assert [r.payload for r in got] == [b"durable"]

            def failing_sync(segment: SegmentWriter) -> None:
                raise OSError(errno.EIO, os.strerror(errno.EIO))

            monkeypatch.setattr(SegmentWriter, "sync", failing_sync)
            with pytest.raises(LogWriteError, match="reopen"):
                await log.append("k", b"not durable")
            await anyio.wait_all_tasks_blocked()
            assert [r.payload for r in got] == [b"durable"]
            assert [r.payload async for r in log.read(Position.of({0: 0}))] == [b"durable"]
            tg.cancel_scope.cancel()
        monkeypatch.undo()


async def test_a_write_cut_back_on_a_full_disk_serves_only_what_the_file_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write cut back on ENOSPC keeps a prefix of its batch in the file: the in-process
    follower gets that prefix (from the file) and nothing of the rest, then later commits from
    memory again; all of it equals what the files hold."""
    disk = ByteBudgetOS(os, 3000, creates_fail_when_full=False)
    monkeypatch.setattr(segment_module, "os", disk)
    async with await FileLog.open(tmp_path, fsync="batch") as log:
        polls = log.read_batches(Position.of({0: 0}), follow=True)
        got: list[Record] = []
        written = 0
        for i in range(100):
            batch = [("k", b"%d-%d" % (i, j) + bytes(150)) for j in range(3)]
            try:
                await log.append_batch(batch)
            except LogDiskFullError as exc:
                written += exc.records_written
                break
            written += 3
            got += await _take(polls, 3)
        assert disk.enospc_raised == 1
        got += await _take(polls, written - len(got))
        disk.free_bytes += 1 << 20
        await log.append_batch([("k", b"after")])
        got += await _take(polls, 1)
        await polls.aclose()
    monkeypatch.undo()
    assert got == await _file_records(tmp_path)
    assert got[-1].payload == b"after" and got[-1].offset == written
