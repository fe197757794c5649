"""Crash test: a writer with fsync=always is SIGKILLed at random moments, over and over.

After every kill the log is reopened: every append the child saw acknowledged is there, no
record is partial or wrong, offsets have no gaps, and the next child continues at the end.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from log.file import FileLog
from tests.log.contract import read_all
from tests.log.crash_child import expected_payload

REPO_ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 50


def _spawn(directory: Path, seed: int) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "tests.log.crash_child", "append", str(directory)]
    return subprocess.Popen(
        [*command, "--seed", str(seed), "--segment-bytes", "65536"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _run_and_kill(directory: Path, rng: random.Random, seed: int) -> tuple[int | None, list[int]]:
    """Start a child, kill it after a random number of acks plus a random delay; return the
    start offset it reported (None if killed before) and the offsets it saw acknowledged."""
    proc = _spawn(directory, seed)
    assert proc.stdout is not None
    wait_for_acks = rng.choice([0, 1, rng.randint(2, 12), rng.randint(10, 60)])
    lines: list[bytes] = []
    if wait_for_acks:
        while sum(line.startswith(b"ack") for line in lines) < wait_for_acks:
            line = proc.stdout.readline()
            assert line, f"child died early: {proc.communicate()[1].decode()}"
            lines.append(line)
    time.sleep(rng.uniform(0, 0.01))
    proc.send_signal(signal.SIGKILL)
    rest, _ = proc.communicate()
    lines.extend(rest.splitlines(keepends=True))
    complete = [line.split() for line in lines if line.endswith(b"\n")]
    start = next((int(words[1]) for words in complete if words[0] == b"start"), None)
    return start, [int(words[1]) for words in complete if words[0] == b"ack"]


async def _verify(directory: Path, acked: list[int]) -> tuple[int, bool]:
    """Reopen as the writer (recovering) and check every record; return the end offset and
    whether recovery cut a torn tail."""
    async with await FileLog.open(directory, fsync="always") as log:
        end = (await log.end()).get(0)
        records = await read_all(log)
        torn = log.recovered_tail is not None
    assert [r.offset for r in records] == list(range(end))
    for record in records:
        assert record.payload == expected_payload(record.offset), f"bad record {record.offset}"
    if acked:
        assert max(acked) < end, f"acknowledged offset {max(acked)} lost (end {end})"
    return end, torn


@pytest.mark.slow
def test_sigkill_never_loses_acknowledged_appends(tmp_path: Path) -> None:
    """50 rounds of SIGKILL at random moments lose no acknowledged record and corrupt none."""
    seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    directory = tmp_path / "log"
    end = 0
    torn_tails = 0
    for round_number in range(ROUNDS):
        start, acked = _run_and_kill(directory, rng, seed + round_number)
        if start is not None:
            assert start == end, f"seed {seed}: child started at {start}, log ended at {end}"
        assert acked == sorted(acked), f"seed {seed}: acks out of order"
        assert all(a >= end for a in acked)
        end, torn = anyio.run(_verify, directory, acked)
        torn_tails += torn
    assert end > ROUNDS, f"seed {seed}: only {end} records in {ROUNDS} rounds"
    print(f"crash test seed {seed}: {ROUNDS} kills, {end} records, {torn_tails} torn tails cut")
