"""The follower's replay fast lane against its record-by-record path, over random bad streams.

A follower whose views are one ``ReplicaSet``, a ``PrefixIndex`` and a ``Stats`` reading it (the
views every command builds) reading a log that hands over polls (``BatchReader``) applies plain
next batches natively, a run at a time; one given ``on_applied`` takes every record through the
record-by-record path, the oracle. Both must end with the same replicas, churn counts, cursors,
metrics, position and snapshots.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from cache.events import (
    BatchMeta,
    BlockRemoved,
    EventBatch,
    WireBatch,
    encode_batch,
)
from consumers import Follower, PrefixIndex, ReplicaSet, SnapshotStore, Stats
from log import BatchReader, EventLog
from tests.consumers.primary_model import PrimaryModel, record

# small enough that some records exceed it (they are undecodable for both paths)
MAX_RECORD_BYTES = 1500


def _bad_stream(rng: random.Random, steps: int) -> list[tuple[str, bytes]]:
    """Records of 3 sources with every kind of trouble a follower meets, interleaved."""
    models = [PrimaryModel(f"w{i}", page_size=1 + i % 2) for i in range(3)]
    out: list[tuple[str, bytes]] = []
    sent: dict[str, list[bytes]] = {m.source: [] for m in models}

    def put(batch: EventBatch) -> None:
        payload = encode_batch(batch)
        sent[batch.source].append(payload)
        out.append((batch.source, payload))

    for model in models:
        if rng.random() < 0.8:  # otherwise the source is joined midway
            put(model.start_epoch())
        else:
            model.epoch = "joined-late"
            model.seq = 3
    for _ in range(steps):
        model = rng.choice(models)
        roll = rng.random()
        tokens = [rng.randrange(6) for _ in range(rng.randrange(1, 12))]
        if roll < 0.55:
            events = model.store(tokens)
            if model.blocks and rng.random() < 0.3:
                held = [h for h, b in model.blocks.items() if b.resident]
                events += model.tombstone(held[:1])
            put(model.batch(events, with_digest=rng.random() < 0.2))
        elif roll < 0.62:  # a duplicate
            if sent[model.source]:
                out.append((model.source, rng.choice(sent[model.source])))
        elif roll < 0.67:  # a gap: one batch lost
            model.batch(model.store(tokens))
            put(model.batch(model.store([9, 9])))
        elif roll < 0.72:  # garbage, or a record over the size limit
            if rng.random() < 0.5:
                out.append(("junk", b"\xff not json"))
            else:
                put(model.batch(model.store(list(range(40, 40 + 400)))))
        elif roll < 0.76:  # a lying digest
            lying = model.batch(model.store(tokens), with_digest=True)
            put(dataclasses.replace(lying, digest="0" * 16))
        elif roll < 0.80:  # an event that does not fit (unknown block)
            put(model.batch([*model.store(tokens), BlockRemoved((123456789,))]))
        elif roll < 0.85:  # a new epoch, sometimes naming a digest algorithm we do not know
            start = model.start_epoch()
            if rng.random() < 0.3:
                meta = BatchMeta(model.page_size, model.sliding_window_size, digest_alg="x")
                start = dataclasses.replace(start, meta=meta)
            put(start)
        elif roll < 0.88:  # an epoch that does not begin with AllBlocksCleared at seq 0
            model.epoch, model.seq = f"bad-{rng.randrange(1 << 30)}", 4
            put(model.batch(model.store(tokens)))
        elif roll < 0.91:  # a batch of an epoch superseded earlier
            if sent[model.source]:
                old = orjson.loads(rng.choice(sent[model.source]))
                old["seq"] += 1000
                out.append((model.source, orjson.dumps(old)))
        else:  # an empty batch
            put(model.batch([]))
    return out


def _state(follower: Follower, replicas: ReplicaSet, stats: Stats) -> dict[str, Any]:
    metrics = dataclasses.asdict(follower.metrics)
    for timing in ("lag_s", "last_snapshot_at"):
        metrics.pop(timing)
    return {
        "metrics": metrics,
        "cursors": follower.cursors.to_obj(),
        "diverged": follower.diverged(),
        "position": follower.position,
        "replicas": replicas.snapshot(),
        "digests": {s: replicas[s].state_digest() for s in replicas.sources()},
        "stats": stats.as_dict(),
    }


async def _replay(
    log: EventLog, snapshot_dir: Path, *, lane: bool, snapshot_every: int = 7
) -> tuple[dict[str, Any], list[Any]]:
    replicas = ReplicaSet()
    stats = Stats(replicas)
    store = SnapshotStore(snapshot_dir, keep=100)
    on_applied = None if lane else (lambda batch: None)
    follower = Follower(
        log,
        [replicas, PrefixIndex(replicas), stats],
        snapshots=store,
        snapshot_every_batches=snapshot_every,
        max_record_bytes=MAX_RECORD_BYTES,
        on_applied=on_applied,
    )
    in_lane = [0]
    run_lane = follower._run_lane

    def counted(*args: Any) -> int:
        took = run_lane(*args)
        in_lane[0] += took
        return took

    follower._run_lane = counted  # type: ignore[method-assign]
    await follower.catch_up()
    positions = [info.position for info in await store.infos()]
    state = _state(follower, replicas, stats)
    if lane:  # the lane took part (how much depends on how troubled the stream is)
        assert in_lane[0] > 0
    else:
        assert in_lane[0] == 0
    return state, positions


@pytest.mark.parametrize("seed", range(12))
async def test_the_lane_ends_where_the_record_by_record_path_ends(
    event_log: EventLog, tmp_path: Path, seed: int
) -> None:
    """Over a random stream with gaps, duplicates, garbage, oversized records, lying and
    unverifiable digests, misfitting events and bad epochs, both paths agree on everything."""
    assert isinstance(event_log, BatchReader)
    rng = random.Random(seed)
    records = _bad_stream(rng, 160)
    # in several appends, so polls end at different places
    cut = rng.randrange(len(records))
    await event_log.append_batch(records[:cut])
    await event_log.append_batch(records[cut:])
    fast, fast_snapshots = await _replay(event_log, tmp_path / "fast", lane=True)
    slow, slow_snapshots = await _replay(event_log, tmp_path / "slow", lane=False)
    assert fast == slow
    assert fast_snapshots == slow_snapshots
    assert fast["metrics"]["batches_applied"] > 0


async def test_a_restored_follower_resumes_in_the_lane(event_log: EventLog, tmp_path: Path) -> None:
    """After restore (cursors from a snapshot) the lane trusts exactly the restored cursors."""
    rng = random.Random(99)
    records = _bad_stream(rng, 120)
    await event_log.append_batch(records[:60])
    first = ReplicaSet()
    writer = Follower(event_log, [first], snapshots=SnapshotStore(tmp_path / "s"))
    await writer.catch_up()
    await writer.snapshot()
    await event_log.append_batch(records[60:])
    restored = ReplicaSet()
    reader = Follower(event_log, [restored], snapshots=SnapshotStore(tmp_path / "s"))
    await reader.restore()
    oracle = ReplicaSet()
    whole = Follower(event_log, [oracle], on_applied=lambda batch: None)
    await whole.catch_up()
    assert reader.cursors.to_obj() == whole.cursors.to_obj()
    assert restored.snapshot() == oracle.snapshot()


async def test_a_following_run_applies_live_records_in_the_lane(event_log: EventLog) -> None:
    """run(follow=True) through the lane keeps applying records appended after it started."""
    model = PrimaryModel("w")
    replicas = ReplicaSet()
    follower = Follower(event_log, [replicas], lag_refresh_s=0.01)
    assert follower._lane_set is replicas
    async with anyio.create_task_group() as tasks:
        await tasks.start(follower.run)
        await event_log.append_batch([record(model.start_epoch("e"))])
        for step in range(5):
            await event_log.append_batch(
                [record(model.batch(model.store([step, 1, 2]), with_digest=step == 3))]
            )
        with anyio.fail_after(10):
            while follower.metrics.batches_applied < 6:  # noqa: ASYNC110  # no per-batch hook in the lane
                await anyio.sleep(0.01)
        tasks.cancel_scope.cancel()
    assert replicas["w"].state_digest() == model.digest.hexdigest()
    assert follower.metrics.digests_checked == 1 and follower.diverged() == {}
    assert follower.cursors.to_obj()["w"]["seq"] == 5


def test_a_wire_batch_callback_keeps_the_record_by_record_path() -> None:
    """``on_applied`` needs each ``WireBatch``, so it turns the lane off (the oracle above)."""
    replicas = ReplicaSet()
    seen: list[WireBatch] = []
    follower = Follower(EventLogStub(), [replicas], on_applied=seen.append)
    assert follower._lane_set is None
    assert Follower(EventLogStub(), [replicas])._lane_set is replicas


def test_views_say_how_they_take_part_in_the_lane() -> None:
    """The standard views (replicas, prefix index, stats) take the lane; a view that declares no
    lane role, or a second ``ReplicaSet``, keeps the record-by-record path."""
    replicas = ReplicaSet()
    standard = [replicas, PrefixIndex(replicas), Stats(replicas)]
    assert Follower(EventLogStub(), standard)._lane_set is replicas

    class OwnWay(ReplicaSet):
        lane_role = None

    own = OwnWay(name="own")
    assert Follower(EventLogStub(), [own, Stats(own)])._lane_set is None
    assert Follower(EventLogStub(), [replicas, ReplicaSet(name="other")])._lane_set is None


class EventLogStub:
    """Never read: the two followers above are only built."""


@pytest.mark.parametrize("digest_every", [0, 100, 250])
async def test_long_clean_runs_match_the_record_by_record_path(
    event_log: EventLog, tmp_path: Path, digest_every: int
) -> None:
    """Runs far longer than one native step (and polls), with a digest now and then, end where
    the record-by-record path ends."""
    models = [PrimaryModel(f"w{i}") for i in range(2)]
    records = [record(model.start_epoch()) for model in models]
    rng = random.Random(digest_every)
    for step in range(1, 600):
        model = models[step % 2]
        tokens = [rng.randrange(50) for _ in range(rng.randrange(1, 5))]
        with_digest = bool(digest_every) and step % digest_every == 0
        records.append(record(model.batch(model.store(tokens), with_digest=with_digest)))
    await event_log.append_batch(records)
    # snapshots far apart, so runs in the lane go on for hundreds of records
    fast, fast_snapshots = await _replay(
        event_log, tmp_path / "fast", lane=True, snapshot_every=450
    )
    slow, slow_snapshots = await _replay(
        event_log, tmp_path / "slow", lane=False, snapshot_every=450
    )
    assert fast == slow
    assert fast_snapshots == slow_snapshots
    assert fast["metrics"]["batches_applied"] == len(records)
    assert fast["diverged"] == {}
