"""The three fsync policies: what each one syncs, and that group commit shares syncs."""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.lowlevel

from log.file import FileLog
from tests.log.contract import read_all


async def _concurrent_appends(log: FileLog, tasks: int, per_task: int) -> None:
    async def writer(task: int) -> None:
        for i in range(per_task):
            await log.append(f"t{task}", f"{i}".encode())

    async with anyio.create_task_group() as tg:
        for task in range(tasks):
            tg.start_soon(writer, task)


async def test_always_syncs_every_append_call(tmp_path: Path) -> None:
    """Under always, every append call gets its own write and fdatasync."""
    async with await FileLog.open(tmp_path, fsync="always") as log:
        await _concurrent_appends(log, tasks=4, per_task=5)
        await log.append_batch([("k", b"a"), ("k", b"b")])
        assert log.commits == 21
        assert log.stats.syncs == 21
        assert 0 < log.stats.sync_s_max <= log.stats.sync_s_total
        assert len(await read_all(log)) == 22


async def test_batch_shares_syncs_between_concurrent_appends(tmp_path: Path) -> None:
    """Under batch, concurrent appends share commits (never more than batch_max_records
    each): far fewer syncs than appends."""
    async with await FileLog.open(
        tmp_path, fsync="batch", batch_max_records=8, batch_max_delay_s=1.0
    ) as log:
        await _concurrent_appends(log, tasks=8, per_task=8)
        assert log.stats.records == 64
        assert log.stats.syncs == log.commits
        assert 8 <= log.commits <= 16
        assert len(await read_all(log)) == 64


async def test_batch_delay_bounds_a_partial_batch(tmp_path: Path) -> None:
    """Under batch, once appends overlap, a commit that is not full still goes out after the
    delay; a lone sequential appender is never held back by it."""
    async with await FileLog.open(
        tmp_path, fsync="batch", batch_max_records=1000, batch_max_delay_s=0.01
    ) as log:
        with anyio.fail_after(30):
            await log.append("k", b"alone")
            await _concurrent_appends(log, tasks=4, per_task=3)
            await log.append("k", b"alone again")
        assert log.stats.records == 14
        assert log.commits < 14


async def test_never_writes_without_syncing_until_close(tmp_path: Path) -> None:
    """Under never, appends are written with no fdatasync; close syncs once."""
    log = await FileLog.open(tmp_path, fsync="never")
    await _concurrent_appends(log, tasks=3, per_task=4)
    assert log.stats.syncs == 0
    assert log.stats.sync_s_total == log.stats.sync_s_max == 0.0
    assert log.stats.records == 12
    await log.close()
    assert log.stats.syncs == 1
    assert log.stats.sync_s_total == log.stats.sync_s_max > 0
    async with await FileLog.open(tmp_path, readonly=True) as reader:
        assert len(await read_all(reader)) == 12


async def test_appends_are_visible_only_once_committed(tmp_path: Path) -> None:
    """end() and readers never show a record before its append was acknowledged."""
    async with await FileLog.open(tmp_path, fsync="batch", batch_max_delay_s=0.05) as log:
        async with anyio.create_task_group() as tg:
            tg.start_soon(log.append, "k", b"pending")
            await anyio.lowlevel.checkpoint()
            assert (await log.end()).get(0) == 0
            assert await read_all(log) == []
        assert (await log.end()).get(0) == 1
