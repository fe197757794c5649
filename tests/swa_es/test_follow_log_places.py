"""``swa-es follow`` and the places it is pointed at: a typo'd FileLog directory is refused
(created only with ``--create-log``), and a damaged log fails the follower with the typed error
instead of reading as a short log."""

from __future__ import annotations

import struct
from pathlib import Path

import anyio
import pytest

from consumers import Follower, ReplicaSet
from log import open_log
from log.errors import CorruptRecordError
from log.file.framing import MAX_BODY_BYTES, decode_frame
from swa_es.cli import main
from tests.consumers.primary_model import PrimaryModel, record

QUICK = ["--duration-s", "1", "--metrics-port", "0"]


def _write_batches(directory: Path, count: int) -> None:
    model = PrimaryModel("w")
    batches = [model.start_epoch()]
    batches += [model.batch(model.store([i, i + 1, i + 2])) for i in range(count - 1)]

    async def go() -> None:
        async with await open_log(directory.as_uri()) as log:
            await log.append_batch([record(b) for b in batches])

    anyio.run(go)


def _break_length(directory: Path, record_index: int) -> None:
    (segment,) = directory.glob("*.log")
    data = bytearray(segment.read_bytes())
    pos = 0
    for _ in range(record_index):
        pos = decode_frame(bytes(data), pos, MAX_BODY_BYTES).end_pos
    struct.pack_into("<I", data, pos, 0xFFFFFF00)
    segment.write_bytes(bytes(data))


def test_a_missing_log_directory_is_refused_without_create_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A typo'd directory: one line naming it and --create-log, nothing created."""
    typo = tmp_path / "lgo"
    assert main(["follow", "--log", str(typo), *QUICK]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(typo) in err and "--create-log" in err
    assert not typo.exists()


def test_create_log_creates_the_directory_and_waits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --create-log the follower makes the directory and follows it (empty) until its
    duration ends."""
    fresh = tmp_path / "fresh" / "log"
    assert main(["follow", "--log", str(fresh), "--create-log", *QUICK]) == 0
    assert fresh.is_dir()


def test_follow_fails_on_a_damaged_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A length field gone bad mid-log ends the follower with the damage named (exit 1), not
    with a healthy follower of the records before it."""
    _write_batches(tmp_path, 20)
    _break_length(tmp_path, 5)
    assert (
        main(["follow", "--log", str(tmp_path), "--duration-s", "30", "--metrics-port", "0"]) == 1
    )
    err = capsys.readouterr().err
    assert "corrupt record at offset 5" in err and "00000000000000000000.log" in err


async def test_a_follower_raises_the_typed_error(tmp_path: Path) -> None:
    """The Follower itself: catch_up raises CorruptRecordError after applying what came
    before the damage."""
    await anyio.to_thread.run_sync(_write_batches, tmp_path, 20)
    await anyio.to_thread.run_sync(_break_length, tmp_path, 5)
    async with await open_log(tmp_path.as_uri(), readonly=True) as log:
        follower = Follower(log, [ReplicaSet()])
        with pytest.raises(CorruptRecordError):
            await follower.catch_up()
        assert follower.position.get(0) == 5
