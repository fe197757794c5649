"""Log positions and records.

A ``Position`` maps partition -> offset. A record's ``position`` is its own (partition, offset);
``Position.after(record)`` is the position just past it, which is what a snapshot stores. A
position given to ``read`` is inclusive; partitions it does not name are read from the beginning.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal, NamedTuple, TypeAlias

import orjson


@dataclass(frozen=True, slots=True)
class Position:
    """An immutable partition -> offset map that round-trips through JSON."""

    _offsets: tuple[tuple[int, int], ...] = ()

    @classmethod
    def of(cls, offsets: Mapping[int, int] | Iterable[tuple[int, int]]) -> Position:
        """Build a position from a mapping or pairs of (partition, offset)."""
        items = offsets.items() if isinstance(offsets, Mapping) else offsets
        merged: dict[int, int] = {}
        for partition, offset in items:
            if type(partition) is not int or partition < 0:
                raise ValueError(f"partition must be a non-negative int, got {partition!r}")
            if type(offset) is not int or offset < 0:
                raise ValueError(f"offset must be a non-negative int, got {offset!r}")
            merged[partition] = offset
        return cls(tuple(sorted(merged.items())))

    @property
    def offsets(self) -> dict[int, int]:
        """A fresh dict of partition -> offset."""
        return dict(self._offsets)

    def get(self, partition: int, default: int = 0) -> int:
        """The offset of ``partition`` (``default`` when not named)."""
        for p, offset in self._offsets:
            if p == partition:
                return offset
        return default

    def partitions(self) -> Iterator[int]:
        """The partitions this position names."""
        return (p for p, _ in self._offsets)

    def merged(self, other: Position) -> Position:
        """This position with every partition of ``other`` overriding it."""
        combined = dict(self._offsets)
        combined.update(other._offsets)
        return Position(tuple(sorted(combined.items())))

    def with_offset(self, partition: int, offset: int) -> Position:
        """This position with ``partition`` set to ``offset``."""
        return self.merged(Position.of({partition: offset}))

    def covers(self, other: Position) -> bool:
        """True when every partition of ``other`` is at or before this position's offset."""
        return all(self.get(p) >= offset for p, offset in other._offsets)

    @classmethod
    def after(cls, record: Record) -> Position:
        """The position just past ``record``."""
        return cls(((record.partition, record.offset + 1),))

    def to_json(self) -> bytes:
        """JSON bytes ``{"partition": offset, ...}``."""
        return orjson.dumps({str(p): o for p, o in self._offsets})

    @classmethod
    def from_json(cls, data: bytes | str) -> Position:
        """Parse what ``to_json`` wrote; raises ``ValueError`` on anything else."""
        try:
            raw = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"position is not JSON: {exc}") from None
        if type(raw) is not dict:
            raise ValueError(f"position must be a JSON object, got {type(raw).__name__}")
        pairs: list[tuple[int, int]] = []
        for key, offset in raw.items():
            if not key.isdigit():
                raise ValueError(f"position partition must be digits, got {key!r}")
            pairs.append((int(key), offset))
        return cls.of(pairs)

    def __str__(self) -> str:
        return ",".join(f"{p}:{o}" for p, o in self._offsets) or "(empty)"


class Record(NamedTuple):
    """One stored record: where it is, its key, its opaque payload and its append time (s).

    Immutable. A named tuple rather than a frozen dataclass: a reader makes one per record, and
    a tuple is made in one step where a frozen dataclass sets each field through a call."""

    partition: int
    offset: int
    key: str
    payload: bytes
    timestamp: float

    @property
    def position(self) -> Position:
        """The record's own position."""
        return Position(((self.partition, self.offset),))


_new_tuple = tuple.__new__


def new_record(partition: int, offset: int, key: str, payload: bytes, timestamp: float) -> Record:
    """``Record(partition, offset, key, payload, timestamp)`` for a reader's per-record path
    (without the keyword handling of the named tuple's constructor)."""
    return _new_tuple(Record, (partition, offset, key, payload, timestamp))


StartAt: TypeAlias = Literal["beginning", "end"] | Position
