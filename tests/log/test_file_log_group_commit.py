"""The group committer on its own: batching limits, write failures and cancellation."""

from __future__ import annotations

import threading

import anyio
import pytest

from log import LogWriteError
from log.file.group_commit import CommitLimits, GroupCommitter


class Recorder:
    """A write function that records what it was given and can be told to fail or wait."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []
        self.fail = False
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, frames: list[bytes], first_offset: int) -> None:
        self.gate.wait(timeout=30)
        if self.fail:
            raise OSError(28, "No space left on device")
        self.calls.append((first_offset, len(frames)))


RECORD = [(b"k", b"v")]


async def test_concurrent_appends_share_a_batch_up_to_max_records() -> None:
    """Appends arriving while a write is in flight join one batch, split at max_records."""
    write = Recorder()
    committer = GroupCommitter(0, write, CommitLimits(max_records=4, max_calls=100, linger_s=0))
    write.gate.clear()
    offsets: list[int] = []

    async def one() -> None:
        offsets.append(await committer.append(RECORD))

    async with anyio.create_task_group() as tg:
        for _ in range(9):
            tg.start_soon(one)
        await anyio.wait_all_tasks_blocked()
        write.gate.set()
    assert sorted(offsets) == list(range(9))
    assert write.calls == [(0, 1), (1, 4), (5, 4)]
    assert committer.committed_end == 9


async def test_max_calls_one_commits_each_call_alone() -> None:
    """With max_calls=1 (fsync=always) every append call is its own write."""
    write = Recorder()
    committer = GroupCommitter(0, write, CommitLimits(max_records=10**9, max_calls=1, linger_s=0))
    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(committer.append, RECORD * 2)
    assert write.calls == [(0, 2), (2, 2), (4, 2), (6, 2), (8, 2)]


async def test_a_failed_write_fails_every_waiter_and_later_appends() -> None:
    """When the write raises, every append of that batch and every later one raises
    LogWriteError, and nothing counts as committed."""
    write = Recorder()
    committer = GroupCommitter(0, write, CommitLimits(max_records=100, max_calls=100, linger_s=0))
    write.fail = True
    failures: list[LogWriteError] = []

    async def one() -> None:
        try:
            await committer.append(RECORD)
        except LogWriteError as exc:
            failures.append(exc)

    async with anyio.create_task_group() as tg:
        for _ in range(6):
            tg.start_soon(one)
    assert len(failures) == 6
    assert all(not f.retriable for f in failures)
    assert committer.committed_end == 0
    write.fail = False
    with pytest.raises(LogWriteError, match="reopen"):
        await committer.append(RECORD)


async def test_cancelled_leader_still_commits_its_batch() -> None:
    """Cancelling the caller that leads a batch neither loses the batch nor strands the other
    appends in it."""
    write = Recorder()
    committer = GroupCommitter(0, write, CommitLimits(max_records=100, max_calls=100, linger_s=0))
    write.gate.clear()
    results: list[int] = []
    leader_scope = anyio.CancelScope()

    async def leader() -> None:
        with leader_scope:
            await committer.append(RECORD)

    async def follower() -> None:
        results.append(await committer.append(RECORD))

    async with anyio.create_task_group() as tg:
        tg.start_soon(leader)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(follower)
        await anyio.wait_all_tasks_blocked()
        leader_scope.cancel()
        await anyio.wait_all_tasks_blocked()
        write.gate.set()
    assert write.calls == [(0, 1), (1, 1)]
    assert results == [1]
    assert committer.committed_end == 2
