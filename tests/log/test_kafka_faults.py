"""KafkaLog under broker faults, against real brokers: stalls that force producer retries, a
broker restart mid-stream, and (3 nodes) the partition leader killed under load."""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import anyio
import pytest
from aiokafka.admin import AIOKafkaAdminClient

from log import LogError, Record
from log.kafka import KafkaLog
from tests.fixtures.kafka import LocalKafka, close_all, factory_for

pytestmark = pytest.mark.kafka

LOAD_TIMEOUT_S = 180  # the most a loaded test may take, faults and recovery included


@dataclass
class Load:
    """What writers sent: payloads acknowledged per key (in order) and payloads that failed.

    Writers keep appending until ``finish_after`` is called and that many more records are
    acknowledged, so they are certainly busy while a fault is injected."""

    acked: dict[str, list[bytes]] = field(default_factory=lambda: defaultdict(list))
    failed: list[bytes] = field(default_factory=list)
    progress: int = 0
    stop_at: int | None = None
    reached: dict[int, anyio.Event] = field(default_factory=dict)

    def wait_for(self, count: int) -> anyio.Event:
        """An event set once ``count`` records were acknowledged."""
        event = self.reached.setdefault(count, anyio.Event())
        if self.progress >= count:
            event.set()
        return event

    def note(self, done: int) -> None:
        """Count ``done`` more acknowledged records and fire the events they reach."""
        self.progress += done
        for count, event in self.reached.items():
            if self.progress >= count:
                event.set()

    def finish_after(self, more: int) -> None:
        """Let the writers stop once ``more`` further records are acknowledged."""
        self.stop_at = self.progress + more

    @property
    def finished(self) -> bool:
        """True once the writers may stop."""
        return self.stop_at is not None and self.progress >= self.stop_at


async def write_load(log: KafkaLog, load: Load, key: str, size: int) -> None:
    """Append batches of ``size`` records under ``key``, one batch at a time, until the load is
    finished; a failed batch is recorded, never retried (a retry could legitimately duplicate)."""
    batch = 0
    while not load.finished:
        payloads = [f"{key}:{batch * size + i}".encode() for i in range(size)]
        batch += 1
        try:
            await log.append_batch([(key, p) for p in payloads])
        except LogError:
            load.failed.extend(payloads)
            await anyio.sleep(0.1)
            continue
        load.acked[key].extend(payloads)
        load.note(size)


async def read_everything(log: KafkaLog) -> list[Record]:
    """Every committed record, retried while the cluster is still settling."""
    with anyio.fail_after(120):
        while True:
            try:
                return [record async for record in log.read()]
            except LogError:
                await anyio.sleep(0.5)


def check_nothing_lost_or_doubled(load: Load, records: list[Record]) -> None:
    """Every acknowledged payload is there exactly once, each key's in order; nothing appears
    twice (failed batches may or may not have landed, but at most once)."""
    counts = Counter(record.payload for record in records)
    doubled = [payload for payload, n in counts.items() if n > 1]
    assert doubled == []
    acked = {p for payloads in load.acked.values() for p in payloads}
    assert acked - set(counts) == set(), "acknowledged records were lost"
    assert set(counts) - acked <= set(load.failed)
    for key, payloads in load.acked.items():
        read_back = [r.payload for r in records if r.key == key and r.payload in acked]
        assert read_back == payloads


async def test_stalled_broker_retries_add_no_duplicates(
    kafka_private_broker: LocalKafka,
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Freezing the broker longer than the request timeout makes the producer time out and
    resend in-flight batches the broker later also processes; idempotence keeps one copy."""
    caplog.set_level(logging.WARNING, logger="aiokafka")
    make, opened = factory_for(kafka_private_broker.bootstrap, request)
    log = await make(partitions=2, request_timeout_s=1.5, linger_ms=5)
    load = Load()
    try:
        with anyio.fail_after(LOAD_TIMEOUT_S):
            async with anyio.create_task_group() as tasks:
                for key in ("alpha", "beta", "gamma"):
                    tasks.start_soon(write_load, log, load, key, 25)
                with anyio.fail_after(60):
                    await load.wait_for(300).wait()
                kafka_private_broker.pause_node(1)
                try:
                    await anyio.sleep(4)
                finally:
                    kafka_private_broker.resume_node(1)
                load.finish_after(300)
        check_nothing_lost_or_doubled(load, await read_everything(log))
        assert load.failed == []
        assert any("Got error produce response" in m for m in caplog.messages), (
            "the stall did not make the producer retry; the test proved nothing"
        )
    finally:
        await close_all(opened)


async def test_broker_restart_mid_stream_loses_nothing_acknowledged(
    kafka_private_broker: LocalKafka, request: pytest.FixtureRequest
) -> None:
    """SIGKILL the broker while writers append, start it again: every record acknowledged
    before, during or after the outage is read back exactly once, in order per key."""
    make, opened = factory_for(kafka_private_broker.bootstrap, request)
    log = await make(partitions=3, append_timeout_s=90)
    load = Load()
    try:
        with anyio.fail_after(LOAD_TIMEOUT_S):
            async with anyio.create_task_group() as tasks:
                for key in ("src-a", "src-b", "src-c", "src-d"):
                    tasks.start_soon(write_load, log, load, key, 10)
                with anyio.fail_after(60):
                    await load.wait_for(400).wait()
                try:
                    kafka_private_broker.stop_node(1, kill=True)
                    killed_at = load.progress
                finally:
                    await anyio.to_thread.run_sync(kafka_private_broker.start_node, 1)
                load.finish_after(400)
        records = await read_everything(log)
        check_nothing_lost_or_doubled(load, records)
        assert load.progress >= killed_at + 400
    finally:
        await close_all(opened)


async def leader_of(bootstrap: str, topic: str, partition: int) -> int:
    """The broker id leading ``partition`` of ``topic`` now."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (description,) = await admin.describe_topics([topic])
    finally:
        await admin.close()
    (entry,) = [p for p in description["partitions"] if p["partition"] == partition]
    return int(entry["leader"])


@pytest.mark.slow
async def test_killing_the_partition_leader_under_load_loses_nothing(
    kafka_cluster3: LocalKafka, request: pytest.FixtureRequest
) -> None:
    """On 3 nodes (replication factor 3, min.insync.replicas 2) SIGKILL the leader of a busy
    partition: writers keep going on the new leader, and every acknowledged record is read back
    exactly once, in order per key."""
    make, opened = factory_for(kafka_cluster3.bootstrap, request)
    log = await make(partitions=3, replication_factor=3, min_insync_replicas=2, append_timeout_s=90)
    load = Load()
    keys = [f"worker-{i}" for i in range(6)]
    victim: int | None = None
    try:
        with anyio.fail_after(LOAD_TIMEOUT_S):
            async with anyio.create_task_group() as tasks:
                for key in keys:
                    tasks.start_soon(write_load, log, load, key, 10)
                with anyio.fail_after(60):
                    await load.wait_for(600).wait()
                (busy,) = (await log.append(keys[0], b"probe")).partitions()
                victim = await leader_of(kafka_cluster3.bootstrap, log.topic, busy)
                kafka_cluster3.stop_node(kafka_cluster3.node_of(victim), kill=True)
                load.finish_after(600)
        records = [r for r in await read_everything(log) if r.payload != b"probe"]
        check_nothing_lost_or_doubled(load, records)
        assert load.failed == []
        assert await leader_of(kafka_cluster3.bootstrap, log.topic, busy) != victim
    finally:
        await close_all(opened)
        if victim is not None:
            node = kafka_cluster3.node_of(victim)
            await anyio.to_thread.run_sync(kafka_cluster3.start_node, node)
