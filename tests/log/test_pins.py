"""Pin files: one per owner, saying whose they are; files of the old format still count."""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from consumers import SnapshotStore
from consumers.snapshots.pinning import pin_for_store, snapshot_pin_name
from log.file import FileLog
from log.file.pins import PinStore, command_of
from log.position import Position


async def test_a_pin_file_says_whose_it_is(tmp_path: Path) -> None:
    """The file holds the position and the owner: the caller's fields, name, command, pid,
    host and time; no temporary file is left beside it."""
    async with await FileLog.open(tmp_path) as log:
        await log.pin("mine", Position.of({0: 7}), owner={"role": "test", "store": "/s"})
        (pin,) = await log.pins()
    assert pin.position == Position.of({0: 7})
    assert pin.owner["role"] == "test" and pin.owner["store"] == "/s"
    assert pin.owner["name"] == "mine" and pin.owner["pid"] == os.getpid()
    assert pin.owner["host"] and pin.owner["written_at"] > 0 and "command" in pin.owner
    assert sorted(p.name for p in (tmp_path / "pins").iterdir()) == ["mine.json"]


async def test_a_pin_file_of_the_old_format_still_holds_retention(tmp_path: Path) -> None:
    """A file of just a position (as earlier versions wrote) reads as a pin and bounds
    retention; the smallest of all pins wins."""
    (tmp_path / "pins").mkdir()
    (tmp_path / "pins" / "old.json").write_bytes(Position.of({0: 12}).to_json())
    async with await FileLog.open(tmp_path, segment_bytes=200, retention_bytes=1) as log:
        await log.pin("new", Position.of({0: 20}))
        assert PinStore(tmp_path).min_offset() == 12
        await log.append_batch([(f"k{i}", b"p" * 40) for i in range(30)])
        await log.apply_retention()
        first = await anext(aiter(log.read()))
    assert 0 < first.offset <= 12
    assert {p.path.name: p.owner for p in PinStore(tmp_path).pins()}["old.json"] == {}


async def test_each_snapshot_store_has_its_own_pin(tmp_path: Path) -> None:
    """Two stores pin separately; two spellings of one store (relative, through a symlink)
    name the same pin, which records the store's resolved path."""
    (tmp_path / "a").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "a")
    a, b = SnapshotStore(tmp_path / "a"), SnapshotStore(tmp_path / "b")
    assert snapshot_pin_name(a) != snapshot_pin_name(b)
    assert snapshot_pin_name(a) == snapshot_pin_name(SnapshotStore(tmp_path / "link"))
    relative = SnapshotStore(os.path.relpath(tmp_path / "a"))  # noqa: ASYNC240
    assert snapshot_pin_name(a) == snapshot_pin_name(relative)
    async with await FileLog.open(tmp_path / "log") as log:
        await pin_for_store(log, a, Position.of({0: 3}))
        await pin_for_store(log, b, Position.of({0: 5}))
        await pin_for_store(log, relative, Position.of({0: 4}))
        pins = {pin.path.stem: pin for pin in await log.pins()}
    assert set(pins) == {snapshot_pin_name(a), snapshot_pin_name(b)}
    assert pins[snapshot_pin_name(a)].position == Position.of({0: 4})
    assert pins[snapshot_pin_name(a)].owner["store"] == str((tmp_path / "a").resolve())
    data = orjson.loads((tmp_path / "log" / "pins" / f"{snapshot_pin_name(b)}.json").read_bytes())
    assert data["position"] == {"0": 5} and data["owner"]["role"] == "snapshots"


def test_the_command_recorded_leaves_options_out() -> None:
    """Program and subcommand only: option values may hold credentials."""
    assert command_of(["/usr/bin/swa-es", "follow", "--log", "kafka://u:p@h/t"]) == "swa-es follow"
    assert command_of(["/x/swa_es/cli/__main__.py", "-v", "route"]) == "cli route"
    assert command_of([]) == ""
