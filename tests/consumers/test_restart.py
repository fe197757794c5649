"""Restart: a follower process SIGKILLed at random moments restores and ends equal."""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from consumers import SnapshotStore
from log import EventLog, open_log
from tests.consumers.primary_model import PrimaryModel, record

pytest.importorskip("log.file")

ROUNDS = 30
BATCHES_PER_ROUND = 60
REPO_ROOT = Path(__file__).resolve().parents[2]


def _step_events(model: PrimaryModel, rng: random.Random) -> list[Any]:
    prompt = [rng.randrange(8) for _ in range(3)] + [rng.randrange(1000) for _ in range(4)]
    events = model.store(prompt)
    hashes = model.hashes(prompt)
    if rng.random() < 0.3:
        events += model.tombstone(hashes[2:4])
    if rng.random() < 0.2:
        events += model.remove(hashes[-1:]) if not _has_children(model, hashes[-1]) else []
    return events


def _has_children(model: PrimaryModel, block_hash: int) -> bool:
    return any(block.parent == block_hash for block in model.blocks.values())


async def _append_round(
    log: EventLog, models: list[PrimaryModel], rng: random.Random, first: bool
) -> None:
    batches = [m.start_epoch() for m in models] if first else []
    for _ in range(BATCHES_PER_ROUND):
        model = rng.choice(models)
        batches.append(model.batch(_step_events(model, rng), with_digest=rng.random() < 0.1))
    await log.append_batch([record(b) for b in batches])


async def _run_follower(
    log_dir: Path, snap_dir: str, out: Path, kill_after_s: float | None
) -> bool:
    """Start a follower process; SIGKILL it after ``kill_after_s``; True when it finished."""
    command = [sys.executable, "-m", "tests.consumers.follower_process"]
    process = await anyio.open_process([*command, str(log_dir), snap_dir, str(out)], cwd=REPO_ROOT)
    async with process:
        if kill_after_s is None:
            await process.wait()
        else:
            with anyio.move_on_after(kill_after_s):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
                return False
    assert process.returncode == 0
    return True


def _report(out: Path) -> dict[str, Any]:
    report: dict[str, Any] = orjson.loads(out.read_bytes())
    out.unlink()
    return report


@pytest.mark.slow
async def test_sigkilled_follower_restores_to_the_full_replay_digest(tmp_path: Path) -> None:
    """30 rounds of appends and random SIGKILLs; the restored follower equals a full replay
    and reads fewer records than it."""
    rng = random.Random(20261202)
    models = [PrimaryModel(f"worker-{i}") for i in range(4)]
    log_dir, snap_dir, out = tmp_path / "log", tmp_path / "snap", tmp_path / "report.json"
    killed = 0
    async with await open_log(log_dir.as_uri()) as log:
        await _append_round(log, models, rng, first=True)
        full_run_s = float("inf")
        for _ in range(2):  # the second run is warm (bytecode cached), like the later ones
            started = time.monotonic()
            assert await _run_follower(log_dir, "-", out, None)
            full_run_s = min(full_run_s, time.monotonic() - started)
            _report(out)
        for _ in range(ROUNDS):
            await _append_round(log, models, rng, first=False)
            delay_s = rng.uniform(0.3, 1.3) * full_run_s
            finished = await _run_follower(log_dir, str(snap_dir), out, delay_s)
            killed += not finished
            if finished:
                _report(out)
        total_records = sum((await log.end()).offsets.values())
    assert await _run_follower(log_dir, "-", out, None)
    full = _report(out)
    assert await _run_follower(log_dir, str(snap_dir), out, None)
    restored = _report(out)
    expected = {m.source: m.digest.hexdigest() for m in models}
    assert full["digests"] == expected
    assert full["records_read"] == total_records
    assert restored["digests"] == expected
    assert restored["diverged"] == {} == full["diverged"]
    assert restored["restored_generation"] is not None
    assert restored["records_read"] < full["records_read"]
    assert killed >= ROUNDS // 3, f"only {killed} of {ROUNDS} rounds were killed mid-way"
    assert len(await SnapshotStore(snap_dir).infos()) <= 2
