"""Processes sharing one FileLog never hurt each other: followers on distinct and shared
snapshot stores, ``swa-es route``, ``restore`` and ``snapshot`` run at once, round after
round; every one exits 0, and the log's pins are one per store, whole, saying whose they are.

Before pins were named per store and written through temporary files of their own, these
processes all pinned ``snapshots`` through ``pins/snapshots.tmp`` and crashed one another
(``FileNotFoundError: .../pins/snapshots.tmp -> .../pins/snapshots.json``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import orjson
import pytest

from consumers import SnapshotStore
from consumers.snapshots.pinning import snapshot_pin_name, store_identity
from log import open_log
from log.file.pins import PinStore
from tests.consumers.primary_model import PrimaryModel, record

REPO_ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 3
BATCHES = 3000
SOURCES = 3


async def _write_log(directory: Path) -> None:
    models = [PrimaryModel(f"w{i}") for i in range(SOURCES)]
    batches = [model.start_epoch() for model in models]
    for i in range(BATCHES - SOURCES):
        model = models[i % SOURCES]
        batches.append(model.batch(model.store([i % 7, i % 5, i, i + 1])))
    async with await open_log(directory.as_uri(), fsync="never") as log:
        await log.append_batch([record(b) for b in batches])


async def _run(command: list[str], cwd: Path) -> tuple[int, str]:
    process = await anyio.run_process(command, cwd=cwd, check=False)
    return process.returncode, process.stderr.decode(errors="replace")[-6000:]


def write_to(store: Path) -> list[str]:
    """The options of a reading command that writes snapshots into ``store`` (and pins)."""
    return ["--snapshots", str(store), "--write-snapshots"]


async def _run_all(commands: list[list[str]]) -> list[tuple[int, str]]:
    """Run every command at once; each one's exit status and the tail of its stderr."""
    results: list[tuple[int, str]] = [(-1, "")] * len(commands)

    async def run_one(i: int, command: list[str]) -> None:
        results[i] = await _run(command, REPO_ROOT)

    async with anyio.create_task_group() as tasks:
        for i, command in enumerate(commands):
            tasks.start_soon(run_one, i, command)
    return results


def _reports(directory: Path) -> list[dict[str, object]]:
    return [orjson.loads(p.read_bytes()) for p in directory.glob("round-*/*.json")]


@pytest.mark.slow
async def test_followers_route_restore_and_snapshot_share_a_log(tmp_path: Path) -> None:
    """Several processes at once on one log, repeatedly: all exit 0, pins intact."""
    log_dir = tmp_path / "log"
    await _write_log(log_dir)
    stores = {name: tmp_path / name for name in ("a", "b", "c")}
    cli = [sys.executable, "-m", "swa_es.cli"]
    follower = [sys.executable, "-m", "tests.consumers.follower_process", str(log_dir)]
    log = ["--log", str(log_dir)]
    for round_number in range(ROUNDS):
        out = tmp_path / f"round-{round_number}"
        out.mkdir()
        commands = [
            # two followers on one store, one on another
            [*follower, str(stores["a"]), str(out / "a1.json")],
            [*follower, str(stores["a"]), str(out / "a2.json")],
            [*follower, str(stores["b"]), str(out / "b1.json")],
            # a route beside the followers of store a, writing there too
            [*cli, "route", *log, *write_to(stores["a"]), "--tokens", "0,0,0,1"],
            [*cli, "restore", *log, *write_to(stores["c"])],
            [*cli, "snapshot", *log, "--snapshots", str(stores["b"])],
        ]
        results = await _run_all(commands)
        for command, (returncode, stderr) in zip(commands, results, strict=True):
            assert returncode == 0, (round_number, command[2:5], stderr)

    pins = PinStore(log_dir)
    assert not list(pins.directory.glob("*.tmp")) and not list(pins.directory.glob(".*"))
    found = {pin.path.stem: pin for pin in pins.pins()}
    by_store = {name: SnapshotStore(path) for name, path in stores.items()}
    stores_resolved = {str(path): path.resolve() for path in stores.values()}
    assert set(found) == {snapshot_pin_name(store) for store in by_store.values()}
    for store in by_store.values():
        pin = found[snapshot_pin_name(store)]
        assert pin.owner["store"] == store_identity(store) == str(stores_resolved[store.url])
        assert pin.owner["role"] == "snapshots" and pin.owner["pid"] > 0
        assert pin.owner["host"] and pin.owner["written_at"] > 0
        assert 0 < pin.position.get(0) <= BATCHES
        oldest = await store.oldest_kept_position()
        assert oldest is not None and oldest.get(0) <= BATCHES
    reports = _reports(tmp_path)
    assert len(reports) == 3 * ROUNDS and not any(r["diverged"] for r in reports)
