"""Disk full: ENOSPC in the middle of FileLog appends, on a real tmpfs and at the OS-call boundary.

Appenders (single records and batches, concurrently, so group commits mix them) write until the
disk is full. Every failing call raises ``LogDiskFullError`` naming the log's directory and the
filesystem; nothing acknowledged is damaged; then space is freed and the SAME open log takes
appends again, continuing at its real end; a reopen finds no torn tail and no damage.
"""

from __future__ import annotations

import errno
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest

import log.file.segment as segment_module
from log import LogDiskFullError, LogWriteError
from log.file import FileLog, FsyncPolicy
from tests.faults.disk import ByteBudgetOS, tmpfs_mount
from tests.faults.knobs import seed

SEGMENT_BYTES = 16 * 1024
APPENDERS = 4
RECORDS_AFTER_FREEING = 10
MAX_CALLS_PER_APPENDER = 5_000  # a bound, so a disk that never fills fails the test, not hangs


def _payload(appender: int, n: int, rng: random.Random) -> bytes:
    head = f"{appender}:{n}:".encode()
    return head + bytes([65 + n % 26]) * rng.randrange(100, 3000)


@dataclass
class Appends:
    """What the appenders saw: acknowledged records by offset, and the disk-full errors."""

    acked: dict[int, bytes] = field(default_factory=dict)
    kept_of_failed: list[bytes] = field(default_factory=list)
    """Payloads of failed batch calls that the error says reached the log (a prefix)."""
    failed: list[bytes] = field(default_factory=list)
    errors: list[LogDiskFullError] = field(default_factory=list)


async def _append_until_full(log: FileLog, appends: Appends, appender: int, rng_seed: int) -> None:
    rng = random.Random(rng_seed)
    failures = 0
    for n in range(MAX_CALLS_PER_APPENDER):
        size = rng.choice([1, 1, 2, 4])
        payloads = [_payload(appender, n * 10 + i, rng) for i in range(size)]
        try:
            if size == 1:
                positions = [await log.append(f"a{appender}", payloads[0])]
            else:
                positions = await log.append_batch([(f"a{appender}", p) for p in payloads])
        except LogDiskFullError as error:
            appends.errors.append(error)
            kept = error.records_written
            appends.failed.extend(payloads[kept:])
            failures += 1
            appends.kept_of_failed.extend(payloads[:kept])
            if failures >= 2:
                return
            continue
        for position, payload in zip(positions, payloads, strict=True):
            appends.acked[position.get(0)] = payload
    raise AssertionError(f"appender {appender}: the disk never filled")


async def _read_all(log: FileLog) -> list[tuple[int, bytes]]:
    return [(record.offset, record.payload) async for record in log.read()]


async def _fill_free_reopen(
    directory: Path, free_space: Callable[[], None], fsync: FsyncPolicy, run_seed: int
) -> Appends:
    appends = Appends()
    log = await FileLog.open(directory, fsync=fsync, segment_bytes=SEGMENT_BYTES)
    async with log:
        async with anyio.create_task_group() as tasks:
            for appender in range(APPENDERS):
                tasks.start_soon(_append_until_full, log, appends, appender, run_seed + appender)
        end_when_full = (await log.end()).get(0)
        _check_log(await _read_all(log), appends, end_when_full)

        free_space()
        more = [(f"after-{i}", f"after free {i}".encode()) for i in range(RECORDS_AFTER_FREEING)]
        positions = await log.append_batch(more[:5])
        for key, payload in more[5:]:
            positions.append(await log.append(key, payload))
        assert [p.get(0) for p in positions] == list(
            range(end_when_full, end_when_full + RECORDS_AFTER_FREEING)
        ), "appends after freeing space must continue at the log's real end"
        appends.acked.update({p.get(0): m[1] for p, m in zip(positions, more, strict=True)})
        before_close = await _read_all(log)
    _check_log(before_close, appends, end_when_full + RECORDS_AFTER_FREEING)

    async with await FileLog.open(directory, fsync="always") as reopened:
        assert reopened.recovered_tail is None, reopened.recovered_tail
        assert reopened.corrupt_offsets == []
        assert await _read_all(reopened) == before_close
    return appends


def _check_log(records: list[tuple[int, bytes]], appends: Appends, end: int) -> None:
    """Offsets 0..end-1 without a gap; every acknowledged record intact at its offset; the rest
    are records the errors said were written; no failed payload is there."""
    assert [offset for offset, _ in records] == list(range(end))
    by_offset = dict(records)
    for offset, payload in appends.acked.items():
        assert by_offset.get(offset) == payload, f"acknowledged record {offset} damaged or lost"
    unacked = [payload for offset, payload in records if offset not in appends.acked]
    assert sorted(unacked) == sorted(appends.kept_of_failed)
    assert not set(appends.failed) & set(by_offset.values()), "a failed record is in the log"


def _check_errors(appends: Appends, directory: Path, mount_point: str | None) -> None:
    assert len(appends.errors) == 2 * APPENDERS
    for error in appends.errors:
        assert isinstance(error, LogWriteError) and error.retriable
        assert error.directory == str(directory)
        assert str(directory) in str(error) and "no space left" in str(error)
        if mount_point is not None:
            assert error.mount_point == mount_point
            assert mount_point in str(error)


def test_enospc_on_a_full_tmpfs(tmp_path: Path) -> None:
    """On a 512 KiB tmpfs, appends fail with LogDiskFullError naming the directory and the
    mount; nothing acknowledged is damaged; deleting a ballast file lets the same log go on."""
    mount_point = tmp_path / "small-disk"
    with tmpfs_mount(mount_point, 512 * 1024) as refused:
        if refused is not None:
            pytest.skip(f"{refused} (the injected-ENOSPC tests below still run)")
        ballast = mount_point / "ballast"
        ballast.write_bytes(bytes(128 * 1024))
        directory = mount_point / "log"
        appends = anyio.run(_fill_free_reopen, directory, ballast.unlink, "batch", seed())
        _check_errors(appends, directory, str(mount_point))
        print(
            f"tmpfs ENOSPC: {len(appends.acked)} records acknowledged, "
            f"{len(appends.errors)} disk-full errors, appends resumed after freeing space"
        )


@pytest.mark.parametrize("fsync", ["always", "batch", "never"])
@pytest.mark.parametrize("creates_fail", [False, True], ids=["writes-fail", "creates-fail-too"])
@pytest.mark.parametrize("budget_kib", [40, 97, 250])
def test_enospc_injected_at_os_write(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fsync: FsyncPolicy,
    creates_fail: bool,
    budget_kib: int,
) -> None:
    """ENOSPC from ``os.write`` (after a short write) and, optionally, from creating the next
    segment: the same guarantees as on a real full disk, whatever the fsync policy."""
    disk = ByteBudgetOS(os, budget_kib * 1024 + 321, creates_fail_when_full=creates_fail)
    monkeypatch.setattr(segment_module, "os", disk)
    directory = tmp_path / "log"

    def free_space() -> None:
        disk.free_bytes += 10 * 1024 * 1024

    appends = anyio.run(_fill_free_reopen, directory, free_space, fsync, seed() + budget_kib)
    _check_errors(appends, directory, None)
    assert disk.enospc_raised >= 1


def test_a_failed_fdatasync_stops_the_log_and_keeps_what_was_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fdatasync failing (EIO) is not undone: that append and every later one raise a
    non-retriable error; a reopen still has every record acknowledged before."""
    disk = ByteBudgetOS(os, 10**9, creates_fail_when_full=False)
    monkeypatch.setattr(segment_module, "os", disk)

    async def scenario() -> None:
        async with await FileLog.open(tmp_path, fsync="always") as log:
            await log.append_batch([("k", f"{i}".encode()) for i in range(5)])
            disk.fdatasync_error = errno.EIO
            with pytest.raises(LogWriteError) as first:
                await log.append("k", b"lost?")
            assert not first.value.retriable and "fdatasync" in str(first.value)
            disk.fdatasync_error = None
            with pytest.raises(LogWriteError) as later:
                await log.append("k", b"after")
            assert not later.value.retriable
        async with await FileLog.open(tmp_path, fsync="always") as reopened:
            records = [r async for r in reopened.read()]
        assert [r.payload for r in records[:5]] == [f"{i}".encode() for i in range(5)]

    anyio.run(scenario)


def test_enospc_right_after_a_segment_roll_removes_the_new_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch that fills a segment, rolls, and hits ENOSPC in the new one is cut back to the
    end of the old segment: the new segment file goes, and later appends roll again cleanly."""
    disk = ByteBudgetOS(os, 0, creates_fail_when_full=False)
    monkeypatch.setattr(segment_module, "os", disk)
    frame = 8 + 18 + 1 + 1000  # frame header + body header + key + payload
    per_segment = 4

    async def scenario(budget: int, directory: Path) -> bool:
        disk.free_bytes = budget
        async with await FileLog.open(directory, fsync="batch", segment_bytes=4200) as log:
            payloads = [bytes([i]) * 1000 for i in range(2 * per_segment)]
            with pytest.raises(LogDiskFullError) as error:
                await log.append_batch([("k", p) for p in payloads])
            kept = error.value.records_written
            crossed = kept == per_segment and segment_module.list_segments(directory) == [0]
            assert (await log.end()).get(0) == kept
            disk.free_bytes = 10**9
            await log.append_batch([("k", p) for p in payloads[kept:]])
            records = [r async for r in log.read()]
        assert [r.payload for r in records] == payloads
        assert segment_module.list_segments(directory) == [0, per_segment]
        async with await FileLog.open(directory) as reopened:
            assert reopened.recovered_tail is None
            assert [r.payload async for r in reopened.read()] == payloads
        return crossed

    crossed = [
        anyio.run(scenario, per_segment * frame + extra, tmp_path / f"log-{extra}")
        for extra in range(0, frame + 64, 97)
    ]
    assert any(crossed), "no budget made the write fail inside the freshly rolled segment"
