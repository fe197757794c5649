"""Snapshots: the store's file format and checks, and the follower's restore."""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import anyio
import pytest

from consumers import (
    Follower,
    PrefixIndex,
    PrefixMatch,
    ReplicaSet,
    SnapshotError,
    SnapshotStore,
    Stats,
)
from consumers.snapshots.format import read_info, read_snapshot
from consumers.snapshots.pinning import snapshot_pin_name
from log import EventLog, Position
from tests.consumers.primary_model import PrimaryModel, record


async def _write_stream(log: EventLog, model: PrimaryModel, steps: int, start: int = 0) -> None:
    batches = [model.start_epoch("e")] if start == 0 else []
    for step in range(start, start + steps):
        events = model.store([step % 7, step, step + 1])
        if step % 5 == 4:
            events += model.tombstone(model.hashes([step % 7, step])[1:])
        batches.append(model.batch(events, with_digest=step % 10 == 0))
    await log.append_batch([record(b) for b in batches])


def _follower(
    log: EventLog,
    store: SnapshotStore | None,
    *,
    snapshot_every_batches: int = 1000,
    keep_snapshots: int | None = None,
    keep_tokens: bool = True,
) -> tuple[Follower, ReplicaSet, PrefixIndex, Stats]:
    replicas = ReplicaSet(keep_tokens=keep_tokens)
    index, stats = PrefixIndex(replicas), Stats(replicas)
    follower = Follower(
        log,
        [replicas, index, stats],
        snapshots=store,
        snapshot_every_batches=snapshot_every_batches,
        keep_snapshots=keep_snapshots,
    )
    return follower, replicas, index, stats


async def test_store_round_trips_views_cursors_and_position(tmp_path: Path) -> None:
    """What write() stored, newest_valid() gives back byte for byte."""
    store = SnapshotStore(tmp_path)
    position = Position.of({0: 12, 3: 4})
    info = await store.write(position, {"w": {"epoch": "e"}}, {"a": b"\x00\x01", "b": b""})
    found = await store.newest_valid(["a", "b"])
    assert found is not None
    assert found.info == info
    assert found.info.position == position
    assert found.views == {"a": b"\x00\x01", "b": b""}
    assert found.cursors == {"w": {"epoch": "e"}}
    names = [entry.name async for entry in anyio.Path(tmp_path).iterdir()]
    assert names == [info.path.name]


async def test_store_keeps_only_the_newest_k(tmp_path: Path) -> None:
    """After five writes with keep=2 the two newest generations remain."""
    store = SnapshotStore(tmp_path, keep=2)
    for offset in range(5):
        await store.write(Position.of({0: offset}), {}, {})
    infos = await store.infos()
    assert [i.generation for i in infos] == [4, 5]
    assert await store.oldest_kept_position() == Position.of({0: 3})


async def test_corrupt_and_foreign_snapshots_are_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A flipped byte or another version is never loaded; the newest good one is."""
    store = SnapshotStore(tmp_path, keep=5)
    good = await store.write(Position.of({0: 1}), {}, {"v": b"good"})
    flipped = await store.write(Position.of({0: 2}), {}, {"v": b"flipped"})
    foreign = await store.write(Position.of({0: 3}), {}, {"v": b"foreign"})
    data = bytearray(flipped.path.read_bytes())
    data[-6] ^= 0xFF
    flipped.path.write_bytes(bytes(data))
    raw = bytearray(foreign.path.read_bytes())
    raw[8:12] = struct.pack("<I", 99)
    foreign.path.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING, logger="consumers.snapshots.directory"):
        found = await store.newest_valid(["v"])
    assert found is not None
    assert found.info.generation == good.generation
    assert "checksum mismatch" in caplog.text
    assert "version 99" in caplog.text
    with pytest.raises(SnapshotError, match="checksum"):
        read_snapshot(flipped.path)
    assert read_info(flipped.path).generation == flipped.generation


async def test_a_truncated_snapshot_and_one_lacking_a_view_are_skipped(tmp_path: Path) -> None:
    """Half a file, or a snapshot without a required view, is never chosen."""
    store = SnapshotStore(tmp_path, keep=5)
    await store.write(Position.of({0: 1}), {}, {"a": b"1", "b": b"1"})
    await store.write(Position.of({0: 2}), {}, {"a": b"2"})
    third = await store.write(Position.of({0: 3}), {}, {"a": b"3", "b": b"3"})
    third.path.write_bytes(third.path.read_bytes()[:30])
    found = await store.newest_valid(["a", "b"])
    assert found is not None
    assert found.views == {"a": b"1", "b": b"1"}
    assert await SnapshotStore(tmp_path / "empty").newest_valid() is None


async def test_restore_loads_the_snapshot_and_replays_only_the_tail(
    event_log: EventLog, tmp_path: Path
) -> None:
    """A second follower restores the views from the snapshot and reads just the new records."""
    model = PrimaryModel("w", sliding_window_size=2)
    await _write_stream(event_log, model, 40)
    store = SnapshotStore(tmp_path / "snap")
    first, _, _, stats = _follower(event_log, store)
    await first.catch_up()
    info = await first.snapshot()
    assert info.position == first.position
    await _write_stream(event_log, model, 15, start=40)

    second, replicas, index, stats_again = _follower(event_log, SnapshotStore(tmp_path / "snap"))
    restored = await second.restore()
    assert restored is not None
    assert restored.generation == info.generation
    assert second.metrics.records_read == 15
    assert replicas["w"].state_digest() == model.digest.hexdigest()
    assert second.cursors.get("w") is not None
    assert index.match([5, 5, 6])["w"] == PrefixMatch(3, 3)
    await first.catch_up()
    assert stats_again.as_dict() == stats.as_dict()


async def test_restore_without_a_store_replays_everything(event_log: EventLog) -> None:
    """snapshots=None: restore() reads the log from the beginning."""
    model = PrimaryModel("w")
    await _write_stream(event_log, model, 10)
    follower, replicas, _, _ = _follower(event_log, None)
    assert await follower.restore() is None
    assert follower.metrics.records_read == 11
    assert replicas["w"].state_digest() == model.digest.hexdigest()


async def test_a_follower_keeping_token_ids_skips_snapshots_without_them(
    event_log: EventLog, tmp_path: Path
) -> None:
    """A follower that keeps no token ids writes snapshots without them: one that keeps them
    (the stream out's) skips those with a warning and replays the log, and gets every block's
    tokens back; the other way, a follower that keeps none restores a snapshot with them."""
    model = PrimaryModel("w")
    await _write_stream(event_log, model, 10)
    store = SnapshotStore(tmp_path)
    bare, _, _, _ = _follower(event_log, store, keep_tokens=False)
    await bare.catch_up()
    await bare.snapshot()
    kept, replicas, _, _ = _follower(event_log, store)
    assert await kept.restore() is None
    assert kept.metrics.records_read == 11
    assert replicas["w"].state_digest() == model.digest.hexdigest()
    assert all(block.token_ids is not None for block in replicas["w"].blocks())
    info = await kept.snapshot()
    dropping, dropped, _, _ = _follower(event_log, store, keep_tokens=False)
    restored = await dropping.restore()
    assert restored is not None and restored.generation == info.generation
    assert dropped["w"].state_digest() == model.digest.hexdigest()
    assert all(block.token_ids is None for block in dropped["w"].blocks())


async def test_restore_skips_a_snapshot_whose_view_bytes_are_bad(
    event_log: EventLog, tmp_path: Path
) -> None:
    """A checksummed snapshot whose view cannot load falls back to the older one."""
    model = PrimaryModel("w")
    await _write_stream(event_log, model, 10)
    store = SnapshotStore(tmp_path)
    first, _, _, _ = _follower(event_log, store)
    await first.catch_up()
    older = await first.snapshot()
    await store.write(first.position, first.cursors.to_obj(), {"replicas": b"junk", "stats": b""})
    second, replicas, _, _ = _follower(event_log, store)
    restored = await second.restore()
    assert restored is not None
    assert restored.generation == older.generation
    assert replicas["w"].state_digest() == model.digest.hexdigest()


async def test_snapshots_are_written_every_n_batches(event_log: EventLog, tmp_path: Path) -> None:
    """With snapshot_every_batches=10, 31 applied batches write 3 snapshots; keep=2 keeps 2."""
    model = PrimaryModel("w")
    await _write_stream(event_log, model, 30)
    store = SnapshotStore(tmp_path)
    follower, _, _, _ = _follower(event_log, store, snapshot_every_batches=10, keep_snapshots=2)
    await follower.catch_up()
    assert follower.metrics.snapshots_written == 3
    assert [i.position for i in await store.infos()] == [
        Position.of({0: 20}),
        Position.of({0: 30}),
    ]
    age = follower.metrics.snapshot_age_s
    assert age is not None
    assert age >= 0
    assert "snapshot_age_s" in follower.metrics.as_dict()


async def test_diverged_sources_stay_diverged_across_a_restore(
    event_log: EventLog, tmp_path: Path
) -> None:
    """A source diverged when the snapshot was taken is still unknown after restore."""
    model = PrimaryModel("w")
    await _write_stream(event_log, model, 3)
    model.seq += 1
    await _write_stream(event_log, model, 2, start=3)
    store = SnapshotStore(tmp_path)
    first, _, _, _ = _follower(event_log, store)
    await first.catch_up()
    await first.snapshot()
    second, _, index, _ = _follower(event_log, store)
    await second.restore()
    assert "seq gap" in second.diverged()["w"]
    assert index.match([0, 0, 1])["w"] == PrefixMatch.unknown()


async def test_file_log_retention_keeps_what_the_oldest_snapshot_needs(tmp_path: Path) -> None:
    """The follower pins the oldest kept snapshot's position; retention deletes only before it."""
    file_log = pytest.importorskip("log.file")

    model = PrimaryModel("w")
    opened = file_log.FileLog.open(tmp_path / "log", segment_bytes=2048, retention_bytes=1)
    async with await opened as log:
        store = SnapshotStore(tmp_path / "snap", keep=2)
        # as before the first snapshot
        await log.pin(snapshot_pin_name(store), Position.of({0: 0}))
        await _write_stream(log, model, 200)
        follower, _, _, _ = _follower(log, store, snapshot_every_batches=50)
        await follower.catch_up()
        deleted = await log.apply_retention()
        oldest = await store.oldest_kept_position()
        assert oldest == Position.of({0: 150})
        first = await anext(aiter(log.read("beginning")))
        assert deleted
        assert 0 < first.offset <= oldest.get(0)
        second, replicas, _, _ = _follower(log, store)
        await second.restore()
        assert replicas["w"].state_digest() == model.digest.hexdigest()
        late, _, _, _ = _follower(log, None)
        await late.catch_up()  # from where retention left the start: mid-epoch, so unknown
        assert "w" in late.diverged()


async def test_a_following_follower_snapshots_on_time_even_when_idle(
    event_log: EventLog, tmp_path: Path
) -> None:
    """run(follow=True) writes the time-based snapshot although no record arrives after it."""
    model = PrimaryModel("w")
    await _write_stream(event_log, model, 3)
    store = SnapshotStore(tmp_path)
    replicas = ReplicaSet()
    follower = Follower(
        event_log, [replicas], snapshots=store, snapshot_every_s=0.05, lag_refresh_s=0.01
    )
    async with anyio.create_task_group() as tasks:
        await tasks.start(follower.run)
        with anyio.fail_after(10):
            # the follower exposes no snapshot event; poll its counter, bounded by fail_after
            while follower.metrics.snapshots_written == 0:  # noqa: ASYNC110  # polling is the point
                await anyio.sleep(0.01)
        tasks.cancel_scope.cancel()
    infos = await store.infos()
    assert infos[-1].position == Position.of({0: 4})
