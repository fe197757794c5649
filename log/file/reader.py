"""Reading a log directory in order: a blocking cursor over segments, run in worker threads.

The cursor needs no writer in its process: it finds segments by listing the directory, seeks
with the sparse index (checking the frame it lands on), and re-reads a file when it grows, so
it tails a log another process writes. An incomplete frame at the end of the newest segment is
"not there yet" (an append in progress, or a torn tail the next writer's recovery cuts). With
``tolerate_tail`` (readers that do not share a process with the writer) a damaged frame that
runs to the end of the newest segment is treated the same way. Either is damage, not a tail,
when a whole record with a later offset follows it in the file (the test recovery makes): a
length field gone bad never hides the records after it. Anything else that fails a check
becomes a ``CorruptRecordError`` naming the segment file and byte position, and a segment file
that is gone while its index remains (or whose offsets the next segment skips) a
``MissingSegmentError``; both are raised only after every good record before them was returned.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import crc32c

from log.errors import ConfigError, CorruptRecordError, LogDamageError
from log.file.framing import (
    FRAME_HEADER,
    HEADERS,
    MAX_BODY_BYTES,
    MIN_BODY_BYTES,
    FrameIncompleteError,
    FrameInvalidError,
    decode_frame,
    decode_frame_fields,
    next_good_frame,
)
from log.file.index import floor_entry, load_index
from log.file.segment import index_path, list_segment_files, missing_segment, segment_path
from log.position import Record

END_SCAN_TARGET = 2**62
_OPEN_RETRIES = 3


@dataclass(frozen=True, slots=True)
class TornTail:
    """Bytes past the last whole record at the end of the newest segment: an append in progress
    (while a writer holds the log) or a write a crash cut short (the next writer's recovery cuts
    it). ``offset`` is the offset the record there would have."""

    segment: str
    byte_position: int
    size_bytes: int
    offset: int


class _Status(Enum):
    MORE = "more"
    TAIL = "tail"
    STOP = "stop"


class SegmentCursor:
    """Yields records from ``start_offset`` (None: the oldest retained) onward, in batches."""

    def __init__(
        self, directory: Path, start_offset: int | None, *, chunk_bytes: int = 1 << 20
    ) -> None:
        self.directory = directory
        self._target = start_offset
        self._chunk_bytes = chunk_bytes
        self._need_bytes = 0
        self._fd: int | None = None
        self._base = 0
        self._pos = 0
        self._scan_offset = 0 if start_offset is None else start_offset
        self._tail_checked: tuple[int, int] | None = None
        self._tail_probed: tuple[int, int, int] | None = None
        self._error: LogDamageError | None = None

    @property
    def scanned_offset(self) -> int:
        """The offset of the frame the cursor stands before."""
        return self._scan_offset

    def read(self, limit: int | None, max_records: int, tolerate_tail: bool) -> list[Record]:
        """Up to ``max_records`` records below ``limit`` (None: all there are); [] when none are
        there yet. Raises ``CorruptRecordError`` (after the good records were returned)."""
        if self._error is not None:
            raise self._error
        records: list[Record] = []
        if self._fd is None and not self._open_segment():
            return records
        while len(records) < max_records and (limit is None or self._scan_offset < limit):
            status = self._read_chunk(records, limit, max_records, tolerate_tail)
            if status is _Status.STOP:
                break
            if status is _Status.TAIL and not self._roll():
                if limit is not None and not tolerate_tail and self._error is None:
                    # Everything below the writer's committed end was written: a gap is damage.
                    reason = "record cut short or missing before the committed end"
                    self._error = CorruptRecordError(
                        self._segment_name(), self._scan_offset, reason, byte_position=self._pos
                    )
                break
        if self._error is not None and not records:
            raise self._error
        return records

    def seek(self, offset: int) -> None:
        """Read on from ``offset`` (the next read finds its segment again), as a new cursor
        would: the records before it were taken elsewhere (the writer's committed tail)."""
        self.close()
        self._target = self._scan_offset = offset
        self._need_bytes = 0
        self._tail_checked = None
        self._tail_probed = None
        self._error = None

    def close(self) -> None:
        """Close the open segment file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _segment_name(self) -> str:
        return segment_path(self.directory, self._base).name

    def _open_segment(self) -> bool:
        for _ in range(_OPEN_RETRIES):
            bases, lost = list_segment_files(self.directory)
            if lost:
                # the segment of the start (from the beginning: one before the first left) is
                # gone; a gap further on is found when the read reaches it
                if self._target is None:
                    if not bases or lost[0] < bases[0]:
                        raise missing_segment(self.directory, lost[0])
                elif self._target >= lost[0]:
                    owner = _floor(sorted(bases + lost), self._target)
                    if owner in lost:
                        raise missing_segment(self.directory, owner)
            if not bases:
                return False
            target = bases[0] if self._target is None else self._target
            if target < bases[0]:
                raise ConfigError(
                    "start",
                    f"offset {target} was deleted by retention; the log starts at {bases[0]}",
                )
            base = _floor(bases, target)
            try:
                fd = os.open(segment_path(self.directory, base), os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            self._seek(fd, base, target)
            return True
        return False

    def open_newest(self) -> bool:
        """Stand in the newest segment file (its last index entry that checks out) whatever
        other segments are missing: where the end of the log is looked for. False: none."""
        bases, _ = list_segment_files(self.directory)
        if not bases:
            return False
        try:
            fd = os.open(segment_path(self.directory, bases[-1]), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        self._seek(fd, bases[-1], END_SCAN_TARGET)
        return True

    def torn_tail(self) -> TornTail | None:
        """What lies past the last whole record where a read stopped at the end of the newest
        segment (None: nothing, or the cursor is elsewhere)."""
        if self._fd is None or self._error is not None or self._later_segments():
            return None
        size = os.fstat(self._fd).st_size
        if self._pos >= size:
            return None
        return TornTail(self._segment_name(), self._pos, size - self._pos, self._scan_offset)

    def _seek(self, fd: int, base: int, target: int) -> None:
        size = os.fstat(fd).st_size
        rel, pos = floor_entry(load_index(index_path(self.directory, base), size), target - base)
        if pos and not _frame_has_offset(fd, pos, base + rel):
            rel, pos = 0, 0
        self._fd, self._base, self._pos = fd, base, pos
        self._scan_offset, self._target = base + rel, target

    def _read_chunk(
        self, records: list[Record], limit: int | None, max_records: int, tolerate_tail: bool
    ) -> _Status:
        assert self._fd is not None
        size = os.fstat(self._fd).st_size
        if self._pos >= size:
            return _Status.TAIL
        want = min(max(self._chunk_bytes, self._need_bytes), size - self._pos)
        data = os.pread(self._fd, want, self._pos)
        self._need_bytes = 0
        p, status = 0, _Status.MORE
        # The per-record loop runs on locals (this is a follower's hot path); the cursor's
        # offset is written back before anything that reads it.
        data_bytes, target = len(data), self._target or 0
        append, decode, new_tuple = records.append, decode_frame_fields, tuple.__new__
        view = memoryview(data)
        while len(records) < max_records and (limit is None or self._scan_offset < limit):
            if p >= data_bytes:
                break
            # Every sound frame the fast path takes; it stops before anything else.
            p, self._scan_offset = _take_sound_frames(
                data, view, p, self._scan_offset, limit, max_records, target, records
            )
            at_limit = limit is not None and self._scan_offset >= limit
            if at_limit or len(records) >= max_records or p >= data_bytes:
                continue  # the loop's own checks end it as they would have
            expected = self._scan_offset
            try:
                offset, timestamp, key, payload, end_pos = decode(data, p, MAX_BODY_BYTES)
                if offset != expected:
                    raise FrameInvalidError(f"offset {offset} where {expected} was expected")
            except FrameIncompleteError:
                status = self._incomplete(data, p, size)
                if status is _Status.TAIL:
                    resumed = self._skip_damage_before_start(data, p, size)
                    if resumed is not None:
                        p, self._scan_offset = resumed
                        continue
                    status = self._tail_unless_damage(data, p, size, None)
                break
            except FrameInvalidError as exc:
                resumed = self._skip_damage_before_start(data, p, size)
                if resumed is not None:
                    p, self._scan_offset = resumed
                    continue
                status = self._invalid(data, p, size, exc.reason, tolerate_tail)
                break
            if offset >= target:
                # log.position.new_record, without the call
                append(new_tuple(Record, (0, offset, key, payload, timestamp)))
            p = end_pos
            self._scan_offset = expected + 1
        else:
            status = _Status.STOP
        self._pos += p
        return status

    def _skip_damage_before_start(self, data: bytes, p: int, size: int) -> tuple[int, int] | None:
        """Step over a damaged frame the caller did not ask for (it lies before the start):
        the chunk's position and offset of the next whole record, if one follows."""
        target = self._target or 0
        if self._scan_offset >= target:
            return None
        resumed = self._next_good_frame(data, p, size)
        if resumed is None or resumed[1] > target:
            return None
        return resumed

    def _next_good_frame(self, data: bytes, p: int, size: int) -> tuple[int, int] | None:
        """(chunk position, offset) of the first whole record with one of the next offsets
        after the damaged frame at ``p`` of the chunk, searching on to the end of the file."""
        found = next_good_frame(data, p, self._scan_offset, MAX_BODY_BYTES)
        if found is not None or self._pos + len(data) >= size:
            return found
        assert self._fd is not None
        rest = os.pread(self._fd, size - self._pos - p, self._pos + p)
        found = next_good_frame(rest, 0, self._scan_offset, MAX_BODY_BYTES)
        return None if found is None else (p + found[0], found[1])

    def _tail_unless_damage(self, data: bytes, p: int, size: int, reason: str | None) -> _Status:
        """At a frame that runs to the end of the file (an append in progress, a torn tail):
        TAIL, unless a whole later record follows it (then it is damage, and the error is
        set). The answer for one file size is kept, so polls of a still tail search once."""
        probe = (self._base, self._pos + p, size)
        if self._tail_probed == probe:
            return _Status.TAIL
        if self._next_good_frame(data, p, size) is None:
            self._tail_probed = probe
            return _Status.TAIL
        if reason is None:
            length = FRAME_HEADER.unpack_from(data, p)[0]
            reason = f"frame length {length} runs past the end of the segment ({size} bytes)"
        self._error = CorruptRecordError(
            self._segment_name(),
            self._scan_offset,
            f"{reason}, yet whole records follow it",
            byte_position=self._pos + p,
        )
        return _Status.STOP

    def _incomplete(self, data: bytes, p: int, size: int) -> _Status:
        if p + FRAME_HEADER.size <= len(data):
            length = FRAME_HEADER.unpack_from(data, p)[0]
            if self._pos + p + FRAME_HEADER.size + length <= size:
                self._need_bytes = FRAME_HEADER.size + length
                return _Status.MORE
        elif self._pos + len(data) < size:
            # The chunk ended inside the frame's header, not the file: read on from the frame.
            return _Status.MORE
        return _Status.TAIL

    def _invalid(self, data: bytes, p: int, size: int, reason: str, tolerate_tail: bool) -> _Status:
        length = FRAME_HEADER.unpack_from(data, p)[0]
        runs_to_end = length < MIN_BODY_BYTES or self._pos + p + FRAME_HEADER.size + length >= size
        if tolerate_tail and runs_to_end and not self._later_segments():
            return self._tail_unless_damage(data, p, size, reason)
        self._error = CorruptRecordError(
            self._segment_name(), self._scan_offset, reason, byte_position=self._pos + p
        )
        return _Status.STOP

    def _later_segments(self) -> list[int]:
        return [b for b in list_segment_files(self.directory)[0] if b > self._base]

    def _roll(self) -> bool:
        """At the end of this segment's data: move to the next segment if there is one."""
        bases, lost = list_segment_files(self.directory)
        later = [b for b in bases if b > self._base]
        lost = [b for b in lost if b > self._base]
        # the next segment is gone when an index without its segment comes first
        gone = bool(lost) and (not later or lost[0] < later[0])
        if not later and not gone:
            return False
        assert self._fd is not None
        if self._tail_checked != (self._base, self._pos):
            # The writer finishes a segment before it creates the next: read this one again.
            self._tail_checked = (self._base, self._pos)
            return True
        following = lost[0] if gone else later[0]
        if self._pos < os.fstat(self._fd).st_size:
            reason = "incomplete frame at the end of a sealed segment"
        elif following != self._scan_offset:
            reason = f"segment ends before offset {following}, where the next segment starts"
        elif gone:
            self._error = missing_segment(self.directory, following)
            return False
        else:
            os.close(self._fd)
            self._fd = None
            fd = os.open(segment_path(self.directory, following), os.O_RDONLY | os.O_CLOEXEC)
            self._fd, self._base, self._pos = fd, following, 0
            return True
        self._error = CorruptRecordError(
            self._segment_name(), self._scan_offset, reason, byte_position=self._pos
        )
        return False


def _floor(starts: list[int], offset: int) -> int:
    """The last of ``starts`` (ascending) at or before ``offset``."""
    return starts[bisect.bisect_right(starts, offset) - 1]


_FRAME_HEADER_BYTES = FRAME_HEADER.size
_HEADERS_BYTES = HEADERS.size
_UNBOUNDED = 2**63


def _take_sound_frames(
    data: bytes,
    view: memoryview,
    p: int,
    expected: int,
    limit: int | None,
    max_records: int,
    target: int,
    records: list[Record],
) -> tuple[int, int]:
    """Append the records of the sound frames from ``p`` on (whole, the expected offset, the
    CRC and the key right) until ``max_records`` or ``limit``; return the position and offset
    where it stopped. Whatever it stops before (a damaged or incomplete frame) goes through
    ``decode_frame_fields``, whose checks it passes exactly when this does."""
    data_bytes = len(data)
    stop = _UNBOUNDED if limit is None else limit
    room = max_records - len(records)
    unpack, checksum, append = HEADERS.unpack_from, crc32c.crc32c, records.append
    new_tuple = tuple.__new__
    while room > 0 and expected < stop and p + _HEADERS_BYTES <= data_bytes:
        length, crc, offset, timestamp, key_length = unpack(data, p)
        end = p + _FRAME_HEADER_BYTES + length
        key_end = p + _HEADERS_BYTES + key_length
        # key_end <= end also means length >= MIN_BODY_BYTES; a u32 length is <= MAX_BODY_BYTES
        if offset != expected or key_end > end or end > data_bytes:
            break
        if checksum(view[p + _FRAME_HEADER_BYTES : end]) != crc:
            break
        try:
            key = data[p + _HEADERS_BYTES : key_end].decode()
        except UnicodeDecodeError:
            break
        if offset >= target:
            # log.position.new_record, without the call
            append(new_tuple(Record, (0, offset, key, data[key_end:end], timestamp)))
            room -= 1
        p = end
        expected += 1
    return p, expected


def _frame_has_offset(fd: int, pos: int, offset: int) -> bool:
    header = os.pread(fd, FRAME_HEADER.size, pos)
    if len(header) < FRAME_HEADER.size:
        return False
    length = FRAME_HEADER.unpack(header)[0]
    if length < MIN_BODY_BYTES:
        return False
    data = header + os.pread(fd, min(length, 1 << 26), pos + FRAME_HEADER.size)
    try:
        return decode_frame(data, 0, MAX_BODY_BYTES).offset == offset
    except (FrameIncompleteError, FrameInvalidError):
        return False


def scan_tail(directory: Path, *, with_tail: bool = True) -> tuple[int, TornTail | None]:
    """The end of the log in ``directory`` (the offset after the last whole record of its
    newest segment, damage in its middle stepped over) and the torn tail after it, if any
    (looked for only ``with_tail``).

    Where damage cannot be stepped over, or a segment is missing past the newest one left, the
    end lies just past it, so that a read up to the end reaches it and raises there."""
    _, lost = list_segment_files(directory)
    lost_end = lost[-1] + 1 if lost else 0
    cursor = SegmentCursor(directory, END_SCAN_TARGET)
    try:
        if not cursor.open_newest():
            return lost_end, None
        try:
            cursor.read(None, 1, tolerate_tail=True)
        except LogDamageError:
            return max(cursor.scanned_offset + 1, lost_end), None
        end = max(cursor.scanned_offset, lost_end)
        return end, cursor.torn_tail() if with_tail else None
    finally:
        cursor.close()


def scan_end(directory: Path) -> int:
    """The offset after the last whole record of the log in ``directory`` (``scan_tail``)."""
    return scan_tail(directory, with_tail=False)[0]


def resume_after(directory: Path, damage: LogDamageError) -> tuple[int, int | None] | None:
    """Where a read that skips ``damage`` goes on: the offset of the next whole record after it
    (in the same segment, else the next segment's first) and how many bytes of the damaged
    segment that leaves out (None: a missing segment's, unknown); None when nothing follows."""
    bases, _ = list_segment_files(directory)
    if isinstance(damage, CorruptRecordError) and damage.byte_position is not None:
        path = directory / damage.segment
        data = path.read_bytes()[damage.byte_position :]
        found = next_good_frame(data, 0, damage.offset, MAX_BODY_BYTES)
        if found is not None:
            return found[1], found[0]
        base = int(path.stem)
        later = [b for b in bases if b > base]
        return (later[0], len(data)) if later else None
    later = [b for b in bases if b > damage.offset]
    return (later[0], None) if later else None
