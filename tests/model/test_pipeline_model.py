"""Model-based at scale: random operation sequences through cache -> Publisher -> FileLog ->
Follower, and after every flush the replica equals the primary.

Each sequence is one primary (a real ``SWARadixCache`` of a random small shape, driven by
``CacheDriver``) publishing as its own source, with random publisher settings (queue bound,
overflow policy, digest cadence, batch splitting) into ONE real FileLog that ONE follower tails.
After every ``flush`` the follower catches up and the source's replica digest must equal the
cache's, with no divergence; sometimes the follower's prefix index must also answer a query
exactly as the cache's own ``match_prefix`` does. Every 100 sequences the follower snapshots and
a fresh follower restored from it must hold the same digests; at the end a fresh full replay of
the whole log must too.

Sequences are seeded (``SWA_ES_FAULT_SEED``), not drawn by hypothesis: a failure names its
sequence and seed, and rerunning with them replays it exactly. CI runs 1,000 sequences of 5-40
operations; ``SWA_ES_MODEL_SEQUENCES=10000`` runs the full 10,000.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from consumers import Follower, PrefixIndex, ReplicaSet, SnapshotStore
from log.file import FileLog
from swa_es import Backpressure, Publisher, PublisherConfig
from tests.faults.cache_driver import CacheDriver, CacheShape
from tests.faults.knobs import model_sequences, seed

CI_SEQUENCES = 1000
SNAPSHOT_EVERY_SEQUENCES = 100
OPERATIONS = {
    "serve": 30,
    "hold": 4,
    "release": 4,
    "evict": 10,
    "match": 6,
    "reset": 1,
    "step": 22,
    "yield": 6,
    "flush": 9,
}


class Pipeline:
    """The shared log, follower and views, plus what every sequence's primary ended with."""

    def __init__(self, log: FileLog, snapshots: SnapshotStore) -> None:
        self.log = log
        self.replicas = ReplicaSet()
        self.index = PrefixIndex(self.replicas)
        self.follower = Follower(log, [self.replicas, self.index], snapshots=snapshots)
        self.final_digests: dict[str, str] = {}
        self.flush_checks = 0
        self.prefix_checks = 0
        self.operations = 0

    async def check(
        self, source: str, stepped_digest: str, driver: CacheDriver, rng: random.Random
    ) -> None:
        """Catch up; the replica of ``source`` must equal the cache as of its last step (and
        answer a prefix query like the cache, when nothing changed since that step)."""
        await self.follower.catch_up()
        replica = self.replicas[source]
        assert replica.diverged is None, replica.diverged
        assert replica.state_digest() == stepped_digest
        assert self.follower.metrics.divergences == 0
        assert self.follower.metrics.undecodable == 0
        self.flush_checks += 1
        if driver.cache.state_digest() == stepped_digest and rng.random() < 0.3:
            tokens, extra_key = driver.prompt(), driver.extra_key()
            held = self.index.match(tokens, extra_key).get(source)
            usable = int(driver.cache.match_prefix(tokens, extra_key=extra_key).indices.numel())
            assert (held.swa_tokens if held is not None else 0) == usable, (tokens, extra_key)
            assert held is None or (held.full_tokens or 0) >= usable
            self.prefix_checks += 1


def _step(pub: Publisher, driver: CacheDriver) -> str | None:
    """``pub.step()``; the cache's digest it published, or None when ``block`` pushed back."""
    try:
        pub.step()
    except Backpressure:
        return None
    return driver.cache.state_digest()


async def _step_until_taken(pub: Publisher, driver: CacheDriver) -> str:
    while (digest := _step(pub, driver)) is None:
        await pub.wait_ready()
    return digest


async def _sequence(pipeline: Pipeline, index: int, run_seed: int) -> None:
    rng = random.Random(run_seed * 1_000_003 + index)
    driver = CacheDriver(rng, CacheShape.random(rng))
    source = f"seq-{index}"
    options = {
        "max_queue_batches": rng.choice([1, 2, 4, 64]),
        "overflow": rng.choice(["resync", "block"]),
        "digest_every_batches": rng.choice([1, 3, 16]),
        "max_events_per_batch": rng.choice([3, 16, 4096]),
        "max_append_batch": rng.choice([1, 8, 64]),
    }
    names, weights = list(OPERATIONS), list(OPERATIONS.values())
    ops = rng.choices(names, weights, k=rng.randint(5, 40))
    config = PublisherConfig(**options)  # type: ignore[arg-type]
    async with Publisher(driver.cache, pipeline.log, source, config=config) as pub:
        stepped = driver.cache.state_digest()  # the epoch opening publishes the tree as it is
        for op in ops:
            pipeline.operations += 1
            if op == "step":
                stepped = await _step_until_taken(pub, driver)
            elif op == "yield":
                await anyio.lowlevel.checkpoint()
            elif op == "flush":
                await pub.flush()
                await pipeline.check(source, stepped, driver, rng)
            else:
                getattr(driver, op)()
        driver.release_all()
        driver.check()
        stepped = await _step_until_taken(pub, driver)
        await pub.flush()
        await pipeline.check(source, stepped, driver, rng)
    pipeline.final_digests[source] = driver.cache.state_digest()


async def _restored_digests(log: FileLog, snapshots: SnapshotStore | None) -> dict[str, str | None]:
    replicas = ReplicaSet()
    follower = Follower(log, [replicas, PrefixIndex(replicas)], snapshots=snapshots)
    await follower.restore()
    assert follower.metrics.divergences == 0
    return {source: replicas[source].state_digest() for source in replicas.sources()}


async def _run(directory: Path, count: int, run_seed: int) -> Pipeline:
    store = SnapshotStore(directory / "snapshots")
    async with await FileLog.open(directory / "log", fsync="batch") as log:
        pipeline = Pipeline(log, store)
        for index in range(count):
            await _sequence(pipeline, index, run_seed)
            if (index + 1) % SNAPSHOT_EVERY_SEQUENCES == 0:
                await pipeline.follower.snapshot()
                restored = await _restored_digests(log, store)
                assert restored == pipeline.final_digests, f"restore after sequence {index}"
        assert await _restored_digests(log, None) == pipeline.final_digests
    return pipeline


@pytest.mark.slow
@pytest.mark.timeout(900 + model_sequences(CI_SEQUENCES) // 4)
def test_random_sequences_keep_every_replica_equal_to_its_primary(tmp_path: Path) -> None:
    """1,000 seeded sequences in CI (10,000 with SWA_ES_MODEL_SEQUENCES=10000): after every
    flush the replica equals the cache, snapshots restore to the same digests, and a full replay
    of the log gives every primary's final digest."""
    count, run_seed = model_sequences(CI_SEQUENCES), seed()
    started = time.monotonic()
    pipeline = anyio.run(_run, tmp_path, count, run_seed)
    print(
        f"pipeline model (seed {run_seed}): {count} sequences, {pipeline.operations} operations, "
        f"{pipeline.flush_checks} flush checks, {pipeline.prefix_checks} prefix checks, "
        f"{pipeline.follower.metrics.batches_applied} batches, "
        f"{pipeline.follower.metrics.digests_checked} in-band digests, 0 divergences, "
        f"{time.monotonic() - started:.1f} s"
    )
