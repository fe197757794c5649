"""``swa-es inspect``: batches as JSON lines, filters, and bad or corrupt records reported."""

from __future__ import annotations

import struct
from pathlib import Path

import anyio
import orjson
import pytest

from cache.events import AllBlocksCleared, BatchMeta, BlockStored, EventBatch, encode_batch
from consumers import SnapshotStore
from log import Position, open_log
from log.file.framing import MAX_BODY_BYTES, decode_frame, encode_frame
from swa_es.cli import main


def batch(source: str, seq: int) -> EventBatch:
    """A small valid batch of ``source``."""
    events = (
        (AllBlocksCleared(),)
        if seq == 0
        else (BlockStored((seq,), None, (seq, seq + 1), 2, None, "GPU"),)
    )
    return EventBatch(source, "e1", seq, 1.0, events, meta=BatchMeta(2, 4) if seq == 0 else None)


def write_log(directory: Path, records: list[tuple[str, bytes]], **options: object) -> None:
    """Append ``records`` to a FileLog in ``directory``."""

    async def go() -> None:
        async with await open_log(directory.as_uri(), **options) as log:
            await log.append_batch(records)

    anyio.run(go)


def good_records() -> list[tuple[str, bytes]]:
    """Three batches of worker-a interleaved with two of worker-b."""
    order = [("worker-a", 0), ("worker-b", 0), ("worker-a", 1), ("worker-b", 1), ("worker-a", 2)]
    return [(source, encode_batch(batch(source, seq))) for source, seq in order]


def json_lines(text: str) -> list[dict[str, object]]:
    """The JSON objects of each stdout line."""
    return [orjson.loads(line) for line in text.splitlines()]


def test_prints_every_batch_with_its_position(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every record becomes one JSON line carrying its offset and the batch fields."""
    write_log(tmp_path, good_records())
    assert main(["inspect", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    lines = json_lines(out)
    assert [line["offset"] for line in lines] == [0, 1, 2, 3, 4]
    assert lines[1]["source"] == "worker-b"
    assert lines[2]["events"][0]["type"] == "BlockStored"  # type: ignore[index]  # JSON
    assert "5 records read" in err and "ok" in err


def test_source_limit_from_and_brief(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--source filters, --limit stops, --from starts at an offset, --brief counts events."""
    write_log(tmp_path, good_records())
    assert main(["inspect", str(tmp_path), "--source", "worker-a", "--limit", "2"]) == 0
    assert [line["seq"] for line in json_lines(capsys.readouterr().out)] == [0, 1]
    assert main(["inspect", str(tmp_path), "--from", "3", "--brief"]) == 0
    lines = json_lines(capsys.readouterr().out)
    assert [line["offset"] for line in lines] == [3, 4]
    assert lines[0]["events"] == {"BlockStored": 1}


def test_undecodable_record_is_reported_with_its_position(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A record that is not a batch is named by offset, the rest still printed, exit 1."""
    records = good_records()
    records.insert(2, ("worker-a", b'{"v": 1, "source": 7}'))
    write_log(tmp_path, records)
    assert main(["inspect", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert len(json_lines(out)) == 5
    assert "bad record at partition 0 offset 2" in err
    assert "FAILED" in err


def test_key_that_is_not_the_source_is_bad(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A batch stored under another source's key is reported."""
    write_log(tmp_path, [("worker-x", encode_batch(batch("worker-a", 0)))])
    assert main(["inspect", str(tmp_path)]) == 1
    assert "record key 'worker-x'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "options",
    [{"segment_bytes": 64}, {}],
    ids=["sealed-segment", "inside-the-last-segment"],
)
def test_corrupt_log_reports_the_position_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: dict[str, object]
) -> None:
    """A flipped byte in an old record: earlier batches printed, position reported, exit 1."""
    records = good_records()
    marker = b"CORRUPT-ME"
    records.insert(2, ("worker-a", marker))
    write_log(tmp_path, records, **options)  # segment_bytes=64: one record per segment
    segment = next(p for p in tmp_path.glob("*.log") if marker in p.read_bytes())
    data = bytearray(segment.read_bytes())
    data[data.index(marker)] ^= 0xFF
    segment.write_bytes(bytes(data))
    assert main(["inspect", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert [line["offset"] for line in json_lines(out)] == [0, 1]
    assert "corrupt log at segment" in err and "offset 2" in err


def test_missing_log_is_one_line_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Inspecting a path that does not exist fails in one line naming it, creating nothing."""
    assert main(["inspect", str(tmp_path / "absent")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "swa-es inspect: error:" in err
    assert str(tmp_path / "absent") in err and not (tmp_path / "absent").exists()


def _frame_positions(segment: Path) -> list[int]:
    """The byte position of each frame of a sound segment."""
    data, pos, found = segment.read_bytes(), 0, []
    while pos < len(data):
        found.append(pos)
        pos = decode_frame(data, pos, MAX_BODY_BYTES).end_pos
    return found


def _break_length(tmp_path: Path, record_index: int) -> tuple[str, int]:
    """Overwrite the length field of one record of the only segment with garbage; the
    segment's name and the frame's byte position."""
    (segment,) = tmp_path.glob("*.log")
    position = _frame_positions(segment)[record_index]
    data = bytearray(segment.read_bytes())
    struct.pack_into("<I", data, position, 0xDEADBEEF)
    segment.write_bytes(bytes(data))
    return segment.name, position


def test_a_garbage_length_fails_naming_segment_and_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A length field gone bad mid-log is damage, not the end of the log: the batches before
    it are printed, then segment, offset and byte are named, exit 1."""
    write_log(tmp_path, good_records())
    name, position = _break_length(tmp_path, 2)
    assert main(["inspect", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert [line["offset"] for line in json_lines(out)] == [0, 1]
    assert f"corrupt log at segment {name} offset 2 (byte {position})" in err
    assert "FAILED" in err


def test_skip_damage_reads_on_and_says_how_much_it_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--skip-damage prints the batches after the damage too, says which offsets and how many
    bytes it skipped, and still exits 1."""
    write_log(tmp_path, good_records())
    (segment,) = tmp_path.glob("*.log")
    positions = _frame_positions(segment)
    frame_bytes = positions[3] - positions[2]
    name, _ = _break_length(tmp_path, 2)
    assert main(["inspect", str(tmp_path), "--skip-damage"]) == 1
    out, err = capsys.readouterr()
    assert [line["offset"] for line in json_lines(out)] == [0, 1, 3, 4]
    assert f"skipped offsets 2..2 (1 records, {frame_bytes} bytes of {name})" in err
    assert "1 records (" in err and "skipped as damaged: FAILED" in err


def test_a_torn_tail_fails_saying_where_and_how_much(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Half a record at the end with no writer holding the log: every whole batch printed,
    then the torn tail's size, segment and byte, exit 1."""
    write_log(tmp_path, good_records())
    (segment,) = tmp_path.glob("*.log")
    whole = segment.stat().st_size
    with segment.open("ab") as segment_file:
        segment_file.write(encode_frame(5, 1.0, b"worker-a", encode_batch(batch("a", 3)))[:30])
    assert main(["inspect", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert len(json_lines(out)) == 5
    assert f"torn tail: 30 bytes at byte {whole} of segment {segment.name}" in err


def test_a_missing_segment_whose_index_remains_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The only segment deleted, its index left: not an empty log but a missing segment."""
    write_log(tmp_path, good_records())
    (segment,) = tmp_path.glob("*.log")
    segment.unlink()
    assert main(["inspect", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"corrupt log at segment {segment.name} offset 0" in err and ".idx remains" in err


def test_an_empty_log_and_an_empty_directory_are_told_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A log a writer created without records is ok and said to be empty; an empty directory
    holds no log, exit 1."""
    write_log(tmp_path / "log", [])
    assert main(["inspect", str(tmp_path / "log")]) == 0
    assert "an empty log (no records)" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["inspect", str(tmp_path / "empty")]) == 1
    assert f"no log in {tmp_path / 'empty'}: an empty directory" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["etc", "snapshot-store", "file"])
def test_a_path_that_is_not_a_log_fails_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """/etc, a snapshot store and a plain file are not logs: one line naming the path, a
    non-zero exit, nothing created or written there."""
    if where == "etc":
        path = Path("/etc")
    elif where == "snapshot-store":
        path = tmp_path / "snapshots"
        anyio.run(SnapshotStore(path).write, Position.of({0: 1}), {}, {"v": b""})
    else:
        path = tmp_path / "a-file"
        path.write_text("not a log")
    before = sorted(p.name for p in path.iterdir()) if path.is_dir() else None
    assert main(["inspect", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "swa-es inspect: error:" in err
    assert (sorted(p.name for p in path.iterdir()) if path.is_dir() else None) == before


def test_verify_snapshots_of_a_missing_or_empty_store_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store that is not there is an error naming the path (and is not created); a store
    holding no snapshots fails."""
    write_log(tmp_path / "log", good_records())
    missing = tmp_path / "no-store"
    assert main(["inspect", str(tmp_path / "log"), "--verify-snapshots", str(missing)]) == 1
    err = capsys.readouterr().err
    assert str(missing) in err and "no snapshot store" in err and not missing.exists()
    (tmp_path / "store").mkdir()
    assert main(["inspect", str(tmp_path / "log"), "--verify-snapshots", str(tmp_path / "store")])
    assert "no snapshots in" in capsys.readouterr().err


def test_an_append_in_progress_is_not_a_torn_tail(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """While a writer holds the log, bytes of a record not yet whole at its end are an append
    in progress: inspect reads the whole records and exits 0."""
    write_log(tmp_path, good_records())
    (segment,) = tmp_path.glob("*.log")

    async def inspect_while_held() -> int:
        async with await open_log(tmp_path.as_uri()):
            with segment.open("ab") as segment_file:
                segment_file.write(encode_frame(5, 1.0, b"a", encode_batch(batch("a", 3)))[:30])
            return await anyio.to_thread.run_sync(main, ["inspect", str(tmp_path)])

    assert anyio.run(inspect_while_held) == 0
    out, err = capsys.readouterr()
    assert len(json_lines(out)) == 5 and "torn tail" not in err
