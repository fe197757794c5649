"""How far behind the log a follower says it is (records and seconds: ``consumers.lag``), and
snapshots that cannot be written: counted, logged, and the follower reads on."""

from __future__ import annotations

import dataclasses
import logging
import shutil
import time
from pathlib import Path

import pytest

from consumers import Follower, PrefixIndex, ReplicaSet, Stats
from consumers.lag import MAX_LOOKS, LagClock
from consumers.snapshots import DirectorySnapshotStore
from log import EventLog, MemoryLog, Position
from tests.consumers.primary_model import PrimaryModel, record


class FakeClock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _follower(log: EventLog, clock: FakeClock, **kwargs: object) -> Follower:
    replicas = ReplicaSet()
    return Follower(log, [replicas, PrefixIndex(replicas), Stats(replicas)], clock=clock, **kwargs)  # type: ignore[arg-type]


async def _append_batches(log: EventLog, model: PrimaryModel, count: int) -> None:
    batches = [model.batch(model.store([n, n + 1, n + 2])) for n in range(count)]
    await log.append_batch([record(b) for b in batches])


def test_lag_clock_dates_the_oldest_record_not_applied() -> None:
    """Seconds behind run from the look that first saw the oldest record not yet applied; both
    numbers are 0 once the follower reaches the end it saw, and again after it falls behind."""
    lag = LagClock()
    assert lag.observe(10.0, Position.of({0: 5}), {0: 5}) == (0, 0.0)
    assert lag.observe(11.0, Position.of({0: 8}), {0: 5}) == (3, 0.0)  # seen just now
    assert lag.observe(14.0, Position.of({0: 9}), {0: 6}) == (3, 3.0)  # 6..8 seen at 11
    assert lag.observe(15.0, Position.of({0: 9}), {0: 8}) == (1, 1.0)  # offset 8 seen at 14
    assert lag.observe(16.0, Position.of({0: 12}), {0: 9}) == (3, 0.0)  # reached the look at 14
    assert lag.observe(20.0, Position.of({0: 12}), {0: 12}) == (0, 0.0)
    assert lag.observe(21.0, Position.of({0: 13, 1: 4}), {0: 12}) == (5, 0.0)
    assert lag.observe(25.0, Position.of({0: 13, 1: 4}), {0: 13, 1: 3}) == (1, 4.0)


def test_lag_clock_keeps_the_oldest_look_when_it_thins_its_history() -> None:
    """A follower stuck while the end moves at every look keeps a bounded history and still
    dates its lag from the first look it has not reached."""
    lag = LagClock()
    for second in range(2 * MAX_LOOKS):
        behind, seconds = lag.observe(float(second), Position.of({0: second + 1}), {0: 0})
    assert (behind, seconds) == (2 * MAX_LOOKS, 2 * MAX_LOOKS - 1)
    assert len(lag._ahead) <= MAX_LOOKS


async def test_an_idle_caught_up_follower_has_no_lag() -> None:
    """The last record was written ten minutes ago and the follower has applied it: 0 records
    and 0 seconds behind (it used to report the record's age)."""
    log = MemoryLog()
    model = PrimaryModel("w")
    old = dataclasses.replace(model.start_epoch("e"), ts=time.time() - 600)
    await log.append_batch([record(old)])
    follower = _follower(log, FakeClock())
    await follower.catch_up()
    assert await follower.refresh_lag() == 0
    assert (follower.metrics.lag_records, follower.metrics.lag_s) == (0, 0.0)


async def test_lag_grows_while_behind_and_returns_to_zero() -> None:
    """Records appended and not read: their count, and the seconds since the follower first
    saw them at the end of the log; reading them brings both back to 0."""
    log, clock = MemoryLog(), FakeClock()
    model = PrimaryModel("w")
    await log.append_batch([record(model.start_epoch("e"))])
    follower = _follower(log, clock)
    await follower.catch_up()
    await _append_batches(log, model, 4)
    assert await follower.refresh_lag() == 4
    assert follower.metrics.lag_s == 0.0
    clock.now += 7.5
    await follower.refresh_lag()
    assert (follower.metrics.lag_records, follower.metrics.lag_s) == (4, 7.5)
    await follower.catch_up()
    assert (follower.metrics.lag_records, follower.metrics.lag_s) == (0, 0.0)


async def test_a_snapshot_that_cannot_be_written_is_counted_and_reading_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The snapshot directory's path is a regular file: each snapshot that falls due fails,
    is counted and logged, and every record is still applied; once the path is a directory
    the next one is written."""
    store_path = tmp_path / "snapshots"
    store_path.write_text("not a directory")
    log, clock = MemoryLog(), FakeClock()
    model = PrimaryModel("w")
    await log.append_batch([record(model.start_epoch("e"))])
    await _append_batches(log, model, 5)
    follower = _follower(
        log, clock, snapshots=DirectorySnapshotStore(store_path), snapshot_every_batches=2
    )
    with caplog.at_level(logging.WARNING, logger="consumers.follower"):
        await follower.catch_up()
    assert follower.metrics.batches_applied == 6
    assert follower.metrics.snapshot_failures == 3
    assert follower.metrics.snapshots_written == 0
    assert sum("cannot write a snapshot" in r.getMessage() for r in caplog.records) == 3
    store_path.unlink()
    shutil.rmtree(store_path, ignore_errors=True)
    await _append_batches(log, model, 2)
    await follower.catch_up()
    assert (follower.metrics.snapshots_written, follower.metrics.snapshot_failures) == (1, 3)
    assert any(store_path.iterdir())


async def test_an_explicit_snapshot_that_fails_raises_and_is_counted(tmp_path: Path) -> None:
    """``snapshot()`` called by hand (the last one at exit) still raises; it counts too."""
    store_path = tmp_path / "file"
    store_path.write_text("x")
    log = MemoryLog()
    model = PrimaryModel("w")
    await log.append_batch([record(model.start_epoch("e"))])
    follower = _follower(log, FakeClock(), snapshots=DirectorySnapshotStore(store_path))
    await follower.catch_up()
    with pytest.raises(OSError):
        await follower.snapshot()
    assert follower.metrics.snapshot_failures == 1
