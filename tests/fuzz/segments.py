"""Damaged FileLog directories and the property every one of them must satisfy.

A case is a list of original records, the segment files written for them by a real FileLog,
and damage applied to those bytes (truncations, bit flips, overwrites, huge lengths, zero or
garbage tails, deleted segments, garbage indexes). ``intact`` counts the records that lie
wholly before the first damaged byte: they must always be read.

The property (``check_damaged_log``): a read-only reader, and then the writer after its
open-time recovery, each return a prefix of the original records at least ``intact`` long and
then either stop cleanly or raise ``CorruptRecordError`` naming a segment file and the offset
of the first record they could not return (``MissingSegmentError``, one of them, for a segment
deleted while its index remains). Nothing else is raised, no read hangs, the memory a read
allocates stays within a small multiple of the log's size, and the recovered writer still
appends a record that reads back; unless the newest segment is the one deleted, which the
writer refuses to open over (appending would reuse its offsets), naming it.
"""

from __future__ import annotations

import base64
import shutil
import tracemalloc
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from log import ConfigError, CorruptRecordError, Position
from log.errors import MissingSegmentError
from log.file import FileLog

FRAME_OVERHEAD = 8 + 18  # u32 length + u32 crc, then u64 offset + f64 timestamp + u16 key length
READ_TIMEOUT_S = 30.0
MEMORY_SLACK_BYTES = 4 * 1024 * 1024


@dataclass
class DamagedLog:
    """Original records, the segment files holding them (name -> bytes) and the damage done."""

    records: list[tuple[str, bytes]]
    segments: dict[str, bytes]
    indexes: dict[str, bytes]
    damage: list[list[Any]] = field(default_factory=list)
    intact: int = 0

    def to_json(self, description: str) -> bytes:
        """The case as a corpus file."""

        def b64(data: bytes) -> str:
            return base64.b64encode(data).decode()

        return orjson.dumps(
            {
                "description": description,
                "damage": self.damage,
                "intact": self.intact,
                "records": [[key, b64(payload)] for key, payload in self.records],
                "segments": {name: b64(data) for name, data in self.segments.items()},
                "indexes": {name: b64(data) for name, data in self.indexes.items()},
            },
            option=orjson.OPT_INDENT_2,
        )

    @classmethod
    def from_json(cls, data: bytes) -> DamagedLog:
        """A corpus file back into a case."""
        raw = orjson.loads(data)

        def unb64(text: str) -> bytes:
            return base64.b64decode(text)

        return cls(
            records=[(key, unb64(payload)) for key, payload in raw["records"]],
            segments={name: unb64(text) for name, text in raw["segments"].items()},
            indexes={name: unb64(text) for name, text in raw["indexes"].items()},
            damage=raw["damage"],
            intact=raw["intact"],
        )

    def write(self, directory: Path) -> None:
        """Lay the (damaged) files out in ``directory``."""
        directory.mkdir(parents=True, exist_ok=True)
        for name, data in {**self.segments, **self.indexes}.items():
            (directory / name).write_bytes(data)


def frame_size(key: str, payload: bytes) -> int:
    """Bytes of one record's frame on disk."""
    return FRAME_OVERHEAD + len(key.encode()) + len(payload)


def write_pristine(
    directory: Path, records: Sequence[tuple[str, bytes]], segment_bytes: int
) -> DamagedLog:
    """Write ``records`` with a real FileLog; the undamaged case."""

    async def go() -> None:
        async with await FileLog.open(directory, fsync="never", segment_bytes=segment_bytes) as log:
            for key, payload in records:
                await log.append(key, payload)

    anyio.run(go)
    segments = {p.name: p.read_bytes() for p in sorted(directory.glob("*.log"))}
    indexes = {p.name: p.read_bytes() for p in sorted(directory.glob("*.idx"))}
    shutil.rmtree(directory)
    return DamagedLog(list(records), segments, indexes, intact=len(records))


def frame_ends(case: DamagedLog) -> list[list[int]]:
    """Per segment (in order), the end position of each of its frames in the pristine files."""
    sizes = iter(frame_size(key, payload) for key, payload in case.records)
    ends: list[list[int]] = []
    for name in sorted(case.segments):
        length, positions, pos = len(case.segments[name]), [], 0
        while pos < length:
            pos += next(sizes)
            positions.append(pos)
        ends.append(positions)
    return ends


def apply_damage(case: DamagedLog, damage: list[list[Any]]) -> DamagedLog:
    """Apply ``damage`` (see ``DAMAGE_KINDS``) to a pristine case; ``intact`` is recomputed."""
    ends = frame_ends(case)
    names = sorted(case.segments)
    segments = {name: bytearray(data) for name, data in case.segments.items()}
    indexes = {name: bytes(data) for name, data in case.indexes.items()}
    first_damage: tuple[int, int] | None = None  # (segment number, byte position)

    def damaged_at(seg: int, pos: int) -> None:
        nonlocal first_damage
        if first_damage is None or (seg, pos) < first_damage:
            first_damage = (seg, pos)

    for kind, seg_choice, *args in damage:
        seg = seg_choice % len(names)
        data = segments.get(names[seg])
        if data is None:
            continue  # deleted by an earlier step
        if kind == "truncate":
            cut = args[0] % (len(data) + 1)
            del data[cut:]
            damaged_at(seg, cut)
        elif kind == "flip" and data:
            pos = args[0] % len(data)
            data[pos] ^= 1 << (args[1] % 8)
            damaged_at(seg, pos)
        elif kind == "overwrite" and data:
            pos = args[0] % len(data)
            patch = bytes(args[1])
            data[pos : pos + len(patch)] = patch[: len(data) - pos]
            damaged_at(seg, pos)
        elif kind == "huge_length" and ends[seg]:
            frame = args[0] % len(ends[seg])
            start = ends[seg][frame - 1] if frame else 0
            if start + 4 <= len(data):
                data[start : start + 4] = int(args[1]).to_bytes(4, "little")
                damaged_at(seg, start)
        elif kind == "tail":
            data += bytes(args[0])
            damaged_at(seg, len(case.segments[names[seg]]))
        elif kind == "delete_segment":
            del segments[names[seg]]
            damaged_at(seg, 0)
        elif kind == "garbage_index":
            index_name = names[seg].removesuffix(".log") + ".idx"
            indexes[index_name] = bytes(args[0])
    intact = len(case.records)
    if first_damage is not None:
        seg, pos = first_damage
        intact = sum(len(e) for e in ends[:seg]) + sum(1 for end in ends[seg] if end <= pos)
    return DamagedLog(
        case.records,
        {name: bytes(data) for name, data in segments.items()},
        indexes,
        damage=[list(step) for step in damage],
        intact=intact,
    )


@dataclass
class Outcome:
    """What one reader got: records, and the offset it stopped at with an error (or None)."""

    records: list[tuple[int, str, bytes]]
    error_offset: int | None
    peak_bytes: int


async def _read(log: FileLog, start: Position | None = None) -> Outcome:
    records: list[tuple[int, str, bytes]] = []
    error_offset = None
    tracemalloc.start()
    try:
        with anyio.fail_after(READ_TIMEOUT_S):
            try:
                async for record in log.read(start or "beginning"):
                    records.append((record.offset, record.key, record.payload))
            except CorruptRecordError as error:
                assert error.segment.endswith(".log"), error.segment
                assert str(error.offset) in str(error) and error.segment in str(error)
                error_offset = error.offset
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return Outcome(records, error_offset, peak)


def _check_prefix(case: DamagedLog, outcome: Outcome, start: int, who: str) -> int:
    got = outcome.records
    expected = [(start + i, key, payload) for i, (key, payload) in enumerate(case.records[start:])]
    assert got == expected[: len(got)], f"{who}: a record differs from what was written"
    read_to = start + len(got)
    assert read_to >= case.intact, (
        f"{who}: stopped at {read_to}, before intact record {case.intact}"
    )
    if outcome.error_offset is not None:
        assert outcome.error_offset == read_to, (
            f"{who}: error at {outcome.error_offset}, read to {read_to}"
        )
    return read_to


def all_bases(case: DamagedLog) -> list[int]:
    """The base offsets of every segment left and of every one deleted with its index left."""
    names = [*case.segments, *case.indexes]
    return sorted({int(name.removesuffix(".log").removesuffix(".idx")) for name in names})


def newest_lost(case: DamagedLog) -> bool:
    """Whether the newest segment was deleted while its index remains."""
    bases = all_bases(case)
    return bool(bases) and f"{bases[-1]:020d}.log" not in case.segments


def first_offset(case: DamagedLog) -> int:
    """Where a read from the beginning starts: the first segment left, or the first deleted
    one whose index remains (where the read raises); a log missing its first segments and
    their indexes reads like one whose retention deleted them."""
    bases = all_bases(case)
    return bases[0] if bases else 0


async def check_damaged_log(case: DamagedLog, directory: Path) -> str:
    """Run the property on ``case`` laid out in ``directory``; a label of what happened."""
    case.write(directory)
    size = sum(len(data) for data in case.segments.values())
    memory_bound = 8 * size + MEMORY_SLACK_BYTES
    head = first_offset(case)
    async with await FileLog.open(directory, readonly=True) as reader:
        outcome = await _read(reader)
        read_to = _check_prefix(case, outcome, head, "reader")
        assert outcome.peak_bytes <= memory_bound, f"reader allocated {outcome.peak_bytes} bytes"
        start = max(head, case.intact // 2)
        from_middle = await _read(reader, Position.of({0: start}))
        _check_prefix(case, from_middle, start, "reader from the middle")
        if head > 0:
            with pytest.raises(ConfigError, match=f"offset {head - 1} "):
                await _read(reader, Position.of({0: head - 1}))
    if newest_lost(case):
        with pytest.raises(MissingSegmentError) as refused:
            await FileLog.open(directory, fsync="never")
        assert refused.value.offset == max(all_bases(case))
        label = "clean" if outcome.error_offset is None else "corrupt-error"
        return f"{label}:newest-segment-missing"
    async with await FileLog.open(directory, fsync="never") as writer:
        recovered = await _read(writer)
        writer_to = _check_prefix(case, recovered, first_offset(case), "writer")
        end = (await writer.end()).get(0)
        assert end >= writer_to
        position = await writer.append("fuzz-probe", b"after recovery")
        assert position.get(0) == end
        probe = await _read(writer, position)
        assert probe.records == [(end, "fuzz-probe", b"after recovery")]
    label = "clean" if outcome.error_offset is None else "corrupt-error"
    return f"{label}:{'all' if read_to == len(case.records) else 'prefix'}"
