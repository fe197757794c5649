"""Fuzzing FileLog segment bytes: every damaged log reads as the records before the damage plus
a typed error naming where (see ``tests.fuzz.segments`` for the property).

Hypothesis draws records, segment sizes and damage; the corpus in ``tests/data/fuzz/segments``
(hand-picked cases and past finds) is replayed on every run.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.corpus import corpus_files
from tests.fuzz.segments import DamagedLog, apply_damage, check_damaged_log, write_pristine

KEYS = st.sampled_from(["w0", "worker-1", "", "ключ"])
RECORDS = st.lists(st.tuples(KEYS, st.binary(max_size=200)), min_size=1, max_size=25)
HUGE = st.sampled_from([0xFFFFFFFF, 0x7FFFFFFF, 0x01000000, 17, 0, 25, 26, 27])
STEP = st.one_of(
    st.tuples(st.just("truncate"), st.integers(0, 9), st.integers(0, 10**6)),
    st.tuples(st.just("flip"), st.integers(0, 9), st.integers(0, 10**6), st.integers(0, 7)),
    st.tuples(
        st.just("overwrite"),
        st.integers(0, 9),
        st.integers(0, 10**6),
        st.lists(st.integers(0, 255), min_size=1, max_size=8),
    ),
    st.tuples(st.just("huge_length"), st.integers(0, 9), st.integers(0, 100), HUGE),
    st.tuples(st.just("tail"), st.integers(0, 9), st.lists(st.integers(0, 255), max_size=64)),
    st.tuples(st.just("tail"), st.integers(0, 9), st.just([0] * 4096)),
    st.tuples(st.just("delete_segment"), st.integers(0, 9)),
    st.tuples(
        st.just("garbage_index"), st.integers(0, 9), st.lists(st.integers(0, 255), max_size=64)
    ),
)
DAMAGE = st.lists(STEP.map(list), min_size=1, max_size=3)


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(records=RECORDS, segment_bytes=st.sampled_from([64, 300, 1000, 1 << 20]), damage=DAMAGE)
def test_damaged_segments_read_up_to_the_damage(
    records: list[tuple[str, bytes]], segment_bytes: int, damage: list[list[object]]
) -> None:
    """Random records in random segment sizes, randomly damaged, satisfy the property."""
    with tempfile.TemporaryDirectory() as tmp:
        pristine = write_pristine(Path(tmp) / "pristine", records, segment_bytes)
        case = apply_damage(pristine, damage)
        anyio.run(check_damaged_log, case, Path(tmp) / "damaged")


@pytest.mark.parametrize("path", corpus_files("segments"), ids=lambda p: p.stem)
def test_segment_corpus(path: Path, tmp_path: Path) -> None:
    """Every case of the corpus satisfies the property (and reads at least its intact part)."""
    case = DamagedLog.from_json(path.read_bytes())
    anyio.run(check_damaged_log, case, tmp_path / "log")
