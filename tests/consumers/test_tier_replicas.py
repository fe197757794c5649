"""Lower tiers in the follower's replicas: tier stores and removals read from a real log (the
replay fast lane and the checked path alike), the state digest with the tiers' terms verified
against the producer's, a tier event that does not fit diverging the source, and a snapshot
restore keeping every tier."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cache.events import BlockRemoved, BlockStored, Event
from consumers import Follower, PrefixIndex, ReplicaSet, SnapshotStore
from log import EventLog
from tests.consumers.primary_model import PrimaryModel, record
from tests.consumers.tiered_model import TieredSource

PAGE = 2


async def _write(log: EventLog, source: TieredSource, rounds: int, *, first: bool) -> None:
    """Rounds of GPU stores, CPU stores of the same and further pages, CPU removals, some
    batches with the digest (the checked path), most without (the fast lane)."""
    model = source.model
    batches = [model.start_epoch("e")] if first else []
    start = 0 if first else 1000
    for step in range(start, start + rounds):
        prompt = [step % 5, step, step + 1, step + 2, step + 3, step + 4]
        events: list[Event] = [*model.store(prompt[:2])]
        hashes = source.hashes(prompt)
        new = [h for h in hashes if h not in source.tiers.get("CPU", set())]
        if new:
            source.tiers.setdefault("CPU", set()).update(new)
            events.append(
                BlockStored(tuple(new), None, tuple(range(len(new) * PAGE)), PAGE, None, "CPU")
            )
        if step % 4 == 3:
            events += source.tier_remove("CPU", new[-1:])
        batch = source.batch(events)
        if step % 3:
            batch = dataclasses.replace(batch, digest=None)
        batches.append(batch)
    await log.append_batch([record(b) for b in batches])


def _follower(log: EventLog, store: SnapshotStore | None) -> tuple[Follower, ReplicaSet]:
    replicas = ReplicaSet()
    follower = Follower(log, [replicas, PrefixIndex(replicas)], snapshots=store)
    return follower, replicas


async def test_tiers_follow_the_log_and_survive_a_restore(
    event_log: EventLog, tmp_path: Path
) -> None:
    """The replica's tiers and digest equal the producer's after the log, and after a restore
    from a snapshot plus the tail."""
    source = TieredSource("w")
    await _write(event_log, source, 30, first=True)
    first, replicas = _follower(event_log, SnapshotStore(tmp_path))
    await first.catch_up()
    assert first.diverged() == {}
    store = replicas.store
    assert store.tiers("w") == [("CPU", len(source.tiers["CPU"]))]
    assert replicas["w"].tiers() == {"CPU": len(source.tiers["CPU"])}
    assert replicas["w"].state_digest() == source.digest()
    await first.snapshot()
    await _write(event_log, source, 10, first=False)
    second, restored = _follower(event_log, SnapshotStore(tmp_path))
    assert await second.restore() is not None
    assert second.metrics.records_read == 10
    assert second.diverged() == {}
    assert restored.store.tiers("w") == [("CPU", len(source.tiers["CPU"]))]
    assert restored["w"].state_digest() == source.digest()
    for block_hash in source.tiers["CPU"]:
        assert restored["w"].tier_holds("CPU", block_hash)


async def test_a_tier_event_that_does_not_fit_diverges_the_source(event_log: EventLog) -> None:
    """Removing a block the CPU tier does not hold makes the source unknown, naming the tier;
    a digest that leaves the tiers' terms out is a mismatch."""
    model = PrimaryModel("w", page_size=PAGE)
    other = TieredSource("v")
    batches = [model.start_epoch("e"), other.model.start_epoch("e")]
    batches.append(model.batch([BlockRemoved((5,), "CPU")]))
    stored = other.tier_store("CPU", [1, 2, 3, 4], 0)
    gpu_only_digest = other.model.digest.hexdigest()
    batch = other.batch(stored)
    batches.append(dataclasses.replace(batch, digest=gpu_only_digest))
    await event_log.append_batch([record(b) for b in batches])
    follower, _ = _follower(event_log, None)
    await follower.catch_up()
    diverged = follower.diverged()
    assert "unknown block 5 on CPU" in diverged["w"]
    assert "digest mismatch" in diverged["v"]
