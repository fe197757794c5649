"""Fault loop on the 3-node Kafka cluster: a rolling restart of every broker, then a SIGKILL of
one, all under load, with ``acks=all`` and idempotence (KafkaLog's defaults).

Three primaries (real caches and ``Publisher``s, one KafkaLog each, as three ``swa-es serve``
would have) publish without pause into a topic of 3 partitions, replication factor 3,
``min.insync.replicas`` 2. Two followers apply the topic live throughout. The brokers are
stopped and started one at a time (each back in every partition's ISR before the next goes),
then the leader of a busy partition is SIGKILLed and later restarted.

Counted from the log itself afterwards: every source's records are exactly the batches its
publisher had acknowledged (nothing lost), no ``(epoch, seq)`` appears twice (nothing
duplicated), and each epoch's seqs run from 0 without a gap. Both live followers, and a fresh
one replaying the topic, hold every primary's digest.
"""

from __future__ import annotations

import functools
import random
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc
import pytest
from aiokafka.admin import AIOKafkaAdminClient

from cache.events import decode_batch
from consumers import Follower, ReplicaSet
from log.kafka import KafkaLog
from swa_es import Publisher
from tests.faults.cache_driver import CacheDriver, CacheShape
from tests.faults.knobs import seed
from tests.fixtures.kafka import LocalKafka, close_all, factory_for

KAFKA_RUN = Path(__file__).resolve().parents[2] / "tools" / "kafka" / "run"

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SOURCES = ("worker-0", "worker-1", "worker-2")
STEP_PAUSE_S = 0.02
SETTLE_TIMEOUT_S = 120
LOADED_AFTER_FAULT_S = 2.5


@dataclass
class Load:
    """The primaries and whether they should keep serving."""

    drivers: dict[str, CacheDriver]
    publishers: dict[str, Publisher] = field(default_factory=dict)
    flushed: dict[str, anyio.Event] = field(default_factory=dict)
    stop: anyio.Event = field(default_factory=anyio.Event)


async def _publish(load: Load, source: str) -> None:
    driver, pub = load.drivers[source], load.publishers[source]
    while not load.stop.is_set():
        driver.serve()
        pub.step()
        await anyio.sleep(STEP_PAUSE_S)
    pub.step()
    await pub.flush(timeout_s=SETTLE_TIMEOUT_S)
    load.flushed[source].set()


async def _describe(bootstrap: str, topic: str) -> list[dict[str, object]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        (description,) = await admin.describe_topics([topic])
    finally:
        await admin.close()
    return list(description["partitions"])


async def _wait_fully_replicated(cluster: LocalKafka, topic: str) -> None:
    """Until every partition has a leader and all 3 replicas in its ISR."""
    with anyio.fail_after(SETTLE_TIMEOUT_S):
        while True:
            try:
                partitions = await _describe(cluster.bootstrap, topic)
                if all(len(p["isr"]) == 3 and p["leader"] >= 0 for p in partitions):  # type: ignore[arg-type,operator]
                    return
            except Exception:  # the cluster is settling: ask again
                pass
            await anyio.sleep(1.0)


async def _node_call(cluster: LocalKafka, method: str, node: int, **kwargs: bool) -> None:
    call = functools.partial(getattr(cluster, method), node, **kwargs)
    try:
        await anyio.to_thread.run_sync(call)
    except RuntimeError:
        if method != "start_node":
            raise
        # A JVM that dies while starting (seen once on a loaded 2-core VM) is the machine's
        # trouble, not the log's: show why, then try that one restart once more.
        tail = _node_log_tail(cluster, node)
        print(f"broker node {node} failed to restart; its log ends:\n{tail}")
        await anyio.to_thread.run_sync(call)


def _node_log_tail(cluster: LocalKafka, node: int) -> str:
    log = KAFKA_RUN / str(cluster.port) / f"n{node}" / "node.log"
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-30:])
    except OSError as exc:
        return f"(no node log: {exc})"


async def _converged(follower: Follower, replicas: ReplicaSet, log: KafkaLog, load: Load) -> None:
    """Until the live follower reached the log's end and holds every primary's digest."""
    end = await log.end()
    with anyio.fail_after(SETTLE_TIMEOUT_S):
        while True:  # a follower has no "reached" event: poll its position
            if follower.position.covers(end):
                break
            await anyio.sleep(0.2)
    for source, driver in load.drivers.items():
        assert replicas[source].state_digest() == driver.cache.state_digest(), source


def _count_from_the_log(records: list[tuple[str, bytes]], load: Load) -> dict[str, int]:
    """Per source: records in the log; asserts nothing acknowledged is missing, nothing is
    there twice, and each epoch's seqs are gap-free from 0."""
    seen: dict[str, Counter[tuple[str, int]]] = defaultdict(Counter)
    for key, payload in records:
        batch = decode_batch(payload)
        assert batch.source == key
        seen[key][(batch.epoch, batch.seq)] += 1
    counts = {}
    for source, pub in load.publishers.items():
        ids = seen[source]
        duplicated = {batch_id: n for batch_id, n in ids.items() if n > 1}
        assert duplicated == {}, f"{source}: batches in the log twice: {duplicated}"
        acked = pub.metrics.batches_published
        assert sum(ids.values()) == acked, (
            f"{source}: {sum(ids.values())} in the log, {acked} acked"
        )
        by_epoch: dict[str, list[int]] = defaultdict(list)
        for epoch, seq in ids:
            by_epoch[epoch].append(seq)
        for epoch, seqs in by_epoch.items():
            assert sorted(seqs) == list(range(len(seqs))), f"{source} epoch {epoch}: a gap"
        counts[source] = acked
    return counts


@pytest.mark.timeout(900)
async def test_rolling_restart_then_a_kill_lose_and_duplicate_nothing(
    kafka_cluster3: LocalKafka, request: pytest.FixtureRequest
) -> None:
    """Rolling restart of all three brokers, then SIGKILL of a partition leader, under load:
    nothing acknowledged lost, nothing duplicated, every follower converges."""
    rng = random.Random(seed())
    make, opened = factory_for(kafka_cluster3.bootstrap, request)
    options = {"partitions": 3, "replication_factor": 3, "min_insync_replicas": 2}
    load = Load({s: CacheDriver(rng, CacheShape(4, 8, 4096, 1024)) for s in SOURCES})
    killed: int | None = None
    started = time.monotonic()
    try:
        logs = {s: await make(**options, append_timeout_s=SETTLE_TIMEOUT_S) for s in SOURCES}
        topic = logs[SOURCES[0]].topic
        followers = []
        for _ in range(2):
            replicas = ReplicaSet()
            reader = await make(**options)
            followers.append((Follower(reader, [replicas]), replicas, reader))
        async with anyio.create_task_group() as tasks:
            for source in SOURCES:
                pub = Publisher(load.drivers[source].cache, logs[source], source)
                load.publishers[source] = await tasks.start(_run_publisher, pub, load, source)
            for follower, _, _ in followers:
                await tasks.start(follower.run)
            await _wait_fully_replicated(kafka_cluster3, topic)
            for node in range(1, kafka_cluster3.nodes + 1):
                await anyio.sleep(LOADED_AFTER_FAULT_S)
                await _node_call(kafka_cluster3, "stop_node", node, kill=False)
                await anyio.sleep(LOADED_AFTER_FAULT_S)
                await _node_call(kafka_cluster3, "start_node", node)
                await _wait_fully_replicated(kafka_cluster3, topic)
            end = await logs[SOURCES[0]].end()
            busy = max(end.partitions(), key=end.get)
            partitions = await _describe(kafka_cluster3.bootstrap, topic)
            killed = int(next(p["leader"] for p in partitions if p["partition"] == busy))  # type: ignore[call-overload]
            await _node_call(kafka_cluster3, "stop_node", kafka_cluster3.node_of(killed), kill=True)
            await anyio.sleep(3 * LOADED_AFTER_FAULT_S)
            await _node_call(kafka_cluster3, "start_node", kafka_cluster3.node_of(killed))
            killed = None
            await _wait_fully_replicated(kafka_cluster3, topic)
            await anyio.sleep(LOADED_AFTER_FAULT_S)
            load.stop.set()
            with anyio.fail_after(SETTLE_TIMEOUT_S):
                for flushed in load.flushed.values():
                    await flushed.wait()
            for follower, replicas, reader in followers:
                await _converged(follower, replicas, reader, load)
            tasks.cancel_scope.cancel()
        for pub in load.publishers.values():
            assert pub.metrics.append_errors == 0 and not pub.metrics.failed, pub.metrics
        fresh = await make(**options)
        records = [(r.key, r.payload) async for r in fresh.read()]
        counts = _count_from_the_log(records, load)
        replicas = ReplicaSet()
        replay = Follower(fresh, [replicas])
        await replay.restore()
        assert replay.metrics.divergences == 0 and replay.metrics.duplicates_skipped == 0
        for source, driver in load.drivers.items():
            assert replicas[source].state_digest() == driver.cache.state_digest()
        resyncs = sum(p.metrics.resyncs for p in load.publishers.values())
        print(
            f"broker faults: rolling restart of 3 brokers + SIGKILL of a leader under load; "
            f"{sum(counts.values())} batches acknowledged = {len(records)} in the log "
            f"(0 lost, 0 duplicated), {resyncs} resyncs, 2 live followers + 1 replay converged, "
            f"{time.monotonic() - started:.0f} s"
        )
    finally:
        load.stop.set()
        await close_all(opened)
        if killed is not None:
            await _node_call(kafka_cluster3, "start_node", kafka_cluster3.node_of(killed))


async def _run_publisher(
    pub: Publisher, load: Load, source: str, *, task_status: anyio.abc.TaskStatus[Publisher]
) -> None:
    async with pub:
        load.publishers[source] = pub
        load.flushed[source] = anyio.Event()
        task_status.started(pub)
        await _publish(load, source)
        await anyio.sleep_forever()
