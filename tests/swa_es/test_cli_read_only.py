"""``route`` and ``restore`` only read: with ``--snapshots`` they restore from the store but
write no snapshot into it and pin nothing in the log, unless ``--write-snapshots`` (before,
each wrote a snapshot every 1,000 batches replayed, rotating out a live follower's, and
rewrote the log's pin). A real FileLog written by ``swa-es serve``, with more than 1,000
batches after the store's snapshot."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

from swa_es.cli import main

pytestmark = pytest.mark.slow

Listing = dict[str, tuple[int, int]]


def listing(*roots: Path) -> Listing:
    """Every file under ``roots``: its size and modification time (ns)."""
    found: Listing = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                stat = path.stat()
                found[str(path)] = (stat.st_size, stat.st_mtime_ns)
    return found


@pytest.fixture(scope="module")
def log_and_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A log whose store holds a snapshot (and the log its pin) 1,100 batches before the end."""
    directory = tmp_path_factory.mktemp("read-only")
    log, store = directory / "log", directory / "store"
    assert main(["serve", "--log", str(log), "--requests", "20", "--window", "64"]) == 0
    assert main(["snapshot", "--log", str(log), "--snapshots", str(store)]) == 0
    argv = ["serve", "--log", str(log), "--source", "worker-1", "--requests", "1100"]
    assert main([*argv, "--window", "64"]) == 0
    return log, store


@pytest.mark.parametrize(
    "argv",
    [
        ["route", "--tokens", "1,2,3"],
        ["restore"],
    ],
    ids=["route", "restore"],
)
def test_reading_commands_leave_the_store_and_the_pins_alone(
    log_and_store: tuple[Path, Path], argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """After route/restore with --snapshots every file of the store and of the log (its pins
    included) is as it was: same names, sizes and modification times."""
    log, store = log_and_store
    before = listing(log, store)
    assert any("pins" in name for name in before), "the snapshot command pinned the log"
    capsys.readouterr()
    assert main([*argv, "--log", str(log), "--snapshots", str(store)]) == 0
    assert listing(log, store) == before
    if argv[0] == "restore":
        restored = orjson.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert restored["snapshot"] is not None and restored["records_replayed"] > 1000


@pytest.mark.parametrize("command", ["route", "restore"])
def test_write_snapshots_writes_and_pins(
    log_and_store: tuple[Path, Path], tmp_path: Path, command: str
) -> None:
    """With --write-snapshots the same run writes a snapshot into the store and pins the log
    (on copies, so the other tests see the originals)."""
    log = Path(shutil.copytree(log_and_store[0], tmp_path / "log"))
    store = Path(shutil.copytree(log_and_store[1], tmp_path / "store"))
    before = listing(log, store)
    argv = [command, "--log", str(log), "--snapshots", str(store), "--write-snapshots"]
    assert main([*argv, *(["--tokens", "1"] if command == "route" else [])]) == 0
    after = listing(log, store)
    assert len(list(store.iterdir())) > len([n for n in before if n.startswith(str(store))])
    changed_pins = [n for n in after if "pins" in n and after[n] != before.get(n)]
    assert changed_pins, "the log was not pinned"


def test_route_write_snapshots_needs_a_store(
    log_and_store: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """--write-snapshots without --snapshots is a usage error naming both."""
    argv = ["route", "--log", str(log_and_store[0]), "--tokens", "1", "--write-snapshots"]
    assert main(argv) == 2
    assert "--write-snapshots: writes into --snapshots" in capsys.readouterr().err
