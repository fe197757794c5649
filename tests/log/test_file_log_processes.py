"""FileLog across processes: following a log another process writes, and the writer lock."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from log import LogLockedError
from log.file import FileLog
from tests.log.contract import read_all, read_n
from tests.log.crash_child import expected_payload

REPO_ROOT = Path(__file__).resolve().parents[2]


def _child(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.log.crash_child", *args],
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.mark.parametrize("fsync", ["always", "batch", "never"])
async def test_follow_a_log_written_by_another_process(tmp_path: Path, fsync: str) -> None:
    """A readonly follower sees, in order and intact, every record a child process appends,
    across segment rolls, while the child is still writing."""
    async with await FileLog.open(tmp_path):
        pass
    count = 300
    async with await FileLog.open(tmp_path, readonly=True, poll_interval_s=0.005) as follower:
        proc = _child("append", str(tmp_path), "--fsync", fsync, "--count", str(count),
                      "--segment-bytes", "8192")  # fmt: skip
        try:
            records = await read_n(follower, count)
        finally:
            _, stderr = await anyio.to_thread.run_sync(proc.communicate)
        assert proc.returncode == 0, stderr.decode()
        assert [r.offset for r in records] == list(range(count))
        assert all(r.payload == expected_payload(r.offset) for r in records)
        assert (await follower.end()).get(0) == count
        assert len(await read_all(follower)) == count


async def test_writer_lock_held_by_another_process(tmp_path: Path) -> None:
    """While another process holds the writer lock, opening for writing raises LogLockedError
    naming its pid; readers still work; once it exits, the lock is free."""
    async with await FileLog.open(tmp_path) as log:
        await log.append("k", b"v")
    proc = _child("hold", str(tmp_path))
    assert proc.stdout is not None and proc.stdin is not None
    try:
        line = await anyio.to_thread.run_sync(proc.stdout.readline)
        assert line == b"locked\n", proc.stderr.read().decode() if proc.stderr else ""
        with pytest.raises(LogLockedError) as info:
            await FileLog.open(tmp_path)
        assert f"pid {proc.pid}" in str(info.value)
        async with await FileLog.open(tmp_path, readonly=True) as reader:
            assert [r.payload for r in await read_all(reader)] == [b"v"]
    finally:
        await anyio.to_thread.run_sync(proc.communicate)
    async with await FileLog.open(tmp_path) as log:
        assert (await log.end()).get(0) == 1


async def test_follower_rides_through_a_writer_crash(tmp_path: Path) -> None:
    """A follower keeps reading while the writer process is SIGKILLed mid-append and a new
    writer recovers and continues: it sees every record once, in order, none partial."""
    async with await FileLog.open(tmp_path):
        pass
    async with await FileLog.open(tmp_path, readonly=True, poll_interval_s=0.005) as follower:
        first = _child("append", str(tmp_path), "--seed", "1")
        assert first.stdout is not None
        for _ in range(25):
            assert await anyio.to_thread.run_sync(first.stdout.readline)
        first.kill()
        await anyio.to_thread.run_sync(first.communicate)
        second = _child("append", str(tmp_path), "--count", "30", "--seed", "2")
        out, err = await anyio.to_thread.run_sync(second.communicate)
        assert second.returncode == 0, err.decode()
        start = int(out.split(b"\n")[0].split()[1])
        records = await read_n(follower, start + 30)
    assert [r.offset for r in records] == list(range(start + 30))
    assert all(r.payload == expected_payload(r.offset) for r in records)
