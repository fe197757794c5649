"""Positions are immutable partition maps that round-trip through JSON."""

from __future__ import annotations

import pytest

from log import Position, Record
from log.position import new_record


def test_json_round_trip() -> None:
    """A position survives to_json / from_json unchanged."""
    position = Position.of({0: 5, 3: 17})
    assert Position.from_json(position.to_json()) == position
    assert position.to_json() == b'{"0":5,"3":17}'


def test_after_record_is_the_next_offset() -> None:
    """The position after a record is its offset + 1 in its partition."""
    record = Record(partition=2, offset=9, key="k", payload=b"", timestamp=0.0)
    assert record.position == Position.of({2: 9})
    assert Position.after(record) == Position.of({2: 10})


def test_new_record_is_the_same_immutable_record() -> None:
    """``new_record`` makes a record equal to the constructor's, as immutable."""
    made = new_record(2, 9, "k", b"payload", 1.5)
    assert made == Record(partition=2, offset=9, key="k", payload=b"payload", timestamp=1.5)
    assert type(made) is Record and hash(made) == hash(Record(2, 9, "k", b"payload", 1.5))
    with pytest.raises(AttributeError):
        made.offset = 3  # type: ignore[misc]


def test_merge_and_covers() -> None:
    """Merging overrides partitions; covers compares every named partition."""
    base = Position.of({0: 3, 1: 4})
    moved = base.with_offset(1, 9)
    assert moved.get(1) == 9 and moved.get(0) == 3 and moved.get(7) == 0
    assert moved.covers(base) and not base.covers(moved)


@pytest.mark.parametrize(
    "raw", [b"[]", b'{"a": 1}', b'{"0": -1}', b'{"0": "1"}', b"nope", b'{"0": 1.5}']
)
def test_bad_json_is_rejected(raw: bytes) -> None:
    """Anything to_json could not have written raises ValueError."""
    with pytest.raises(ValueError, match=r"position|partition|offset"):
        Position.from_json(raw)
