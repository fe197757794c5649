"""``swa-es inspect``: batches as JSON lines, filters, and bad or corrupt records reported."""

from __future__ import annotations

from pathlib import Path

import anyio
import orjson
import pytest

from cache.events import AllBlocksCleared, BatchMeta, BlockStored, EventBatch, encode_batch
from log import open_log
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


def test_missing_log_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Inspecting a directory that holds no log is a configuration error, one line."""
    assert main(["inspect", str(tmp_path / "absent")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "swa-es inspect: error:" in err
