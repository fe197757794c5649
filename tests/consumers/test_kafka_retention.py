"""Retention as users run it: the event topic deletes old segments while primaries publish, and
a fresh follower with no local state bootstraps from the Kafka snapshot topic.

The topic has a short ``retention.ms`` and ``segment.ms``; the broker must apply retention often
(``log.retention.check.interval.ms``, which tools/kafka/kafka.sh sets to one second). When the
session's broker checks less often, the test runs on a broker of its own from kafka.sh.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import anyio
import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from consumers import Follower, PrefixIndex, ReplicaSet, SnapshotStorage, open_snapshot_store
from log.kafka import KafkaLog, parse_options
from tests.consumers.primary_model import PrimaryModel, record
from tests.fixtures.kafka import fresh_topic

pytestmark = pytest.mark.kafka

RETENTION_MS = 1000
SEGMENT_MS = 200
MAX_CHECK_INTERVAL_MS = 5000
DELETION_TIMEOUT_S = 60


async def _retention_check_interval_ms(bootstrap: str) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    await admin.start()
    try:
        cluster = await admin.describe_cluster()
        broker = str(cluster["brokers"][0]["node_id"])
        (response,) = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, broker)]
        )
    finally:
        await admin.close()
    entries = response.to_object()["resources"][0]["config_entries"]
    values = {e["config_names"]: e["config_value"] for e in entries}
    return int(values["log.retention.check.interval.ms"])


@pytest.fixture
async def retention_bootstrap(kafka_bootstrap: str, request: pytest.FixtureRequest) -> str:
    """A broker that applies retention within seconds: the session's, or one of the tests' own
    (kafka.sh) when the session's checks only every few minutes."""
    if await _retention_check_interval_ms(kafka_bootstrap) <= MAX_CHECK_INTERVAL_MS:
        return kafka_bootstrap
    own = request.getfixturevalue("kafka_private_broker")
    assert await _retention_check_interval_ms(own.bootstrap) <= MAX_CHECK_INTERVAL_MS
    return str(own.bootstrap)


def _topic_configs(retention_ms: int) -> dict[str, str]:
    return {
        "cleanup.policy": "delete",
        "retention.ms": str(retention_ms),
        "segment.ms": str(SEGMENT_MS),
    }


async def _set_retention_ms(bootstrap: str, topic: str, retention_ms: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    await admin.start()
    try:
        await admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, configs=_topic_configs(retention_ms))]
        )
    finally:
        await admin.close()


@pytest.fixture
async def short_lived_log(
    retention_bootstrap: str, request: pytest.FixtureRequest
) -> AsyncIterator[KafkaLog]:
    """A one-partition event topic whose segments roll every SEGMENT_MS and are deleted
    RETENTION_MS after their last record."""
    topic = fresh_topic(request)
    admin = AIOKafkaAdminClient(bootstrap_servers=retention_bootstrap, request_timeout_ms=10000)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(topic, 1, 1, topic_configs=_topic_configs(RETENTION_MS))]
        )
    finally:
        await admin.close()
    log = await KafkaLog.open(parse_options(retention_bootstrap, f"/{topic}", {"partitions": 1}))
    async with log:
        yield log


class Primaries:
    """Two primaries publishing page-1 blocks (a digest in every fifth batch)."""

    def __init__(self, log: KafkaLog) -> None:
        self.log = log
        self.models = {name: PrimaryModel(name) for name in ("p1", "p2")}
        self.step = 0

    async def start(self) -> None:
        await self.log.append_batch([record(m.start_epoch()) for m in self.models.values()])

    async def publish(self) -> None:
        self.step += 1
        batches = []
        for index, model in enumerate(self.models.values()):
            tokens = [index, self.step % 13, self.step]
            events = model.store(tokens)
            batches.append(model.batch(events, with_digest=self.step % 5 == 0))
        await self.log.append_batch([record(b) for b in batches])

    def digest(self, name: str) -> str:
        return self.models[name].digest.hexdigest()


def _follower(log: KafkaLog, store: SnapshotStorage | None) -> tuple[Follower, ReplicaSet]:
    replicas = ReplicaSet()
    return Follower(log, [replicas, PrefixIndex(replicas)], snapshots=store), replicas


async def test_a_fresh_follower_bootstraps_from_the_snapshot_topic_after_retention(
    short_lived_log: KafkaLog, retention_bootstrap: str, request: pytest.FixtureRequest
) -> None:
    """Retention deletes the start of the event topic while primaries publish. A follower with
    no local state restores the newest snapshot from the snapshot topic, replays only the tail,
    and ends equal to every primary's digest. Without a usable snapshot (none, or one older than
    what the log still holds) the follower says which positions are gone and marks the sources
    unknown, never guessing; a source that starts a new epoch is trusted again."""
    log = short_lived_log
    snapshots_url = f"kafka://{retention_bootstrap}/{fresh_topic(request)}"
    stores: list[SnapshotStorage] = []

    async def store(group: str) -> SnapshotStorage:
        stores.append(await open_snapshot_store(snapshots_url, group=group))
        return stores[-1]

    try:
        primaries = Primaries(log)
        await primaries.start()
        router, _ = _follower(log, await store("routers"))
        early, _ = _follower(log, await store("early"))
        for _ in range(5):
            await primaries.publish()
        await early.catch_up()
        await early.snapshot()  # a snapshot that retention will overtake

        with anyio.fail_after(DELETION_TIMEOUT_S):
            while (await log.beginning()).get(0) <= early.position.get(0):
                await primaries.publish()
                await router.catch_up()
                await anyio.sleep(0.05)
        await router.catch_up()
        taken = await router.snapshot()
        # what follows reads the tail after the snapshot: keep it (on a loaded machine the
        # reads below could otherwise race the one-second retention)
        await _set_retention_ms(retention_bootstrap, log.topic, 3_600_000)
        tail = 7
        for _ in range(tail):
            await primaries.publish()

        # a second router on another machine: empty disk, the snapshot topic only
        fresh, replicas = _follower(log, await store("routers"))
        restored = await fresh.restore()
        assert restored is not None
        assert restored.position == taken.position
        assert fresh.lost_history == {}
        assert fresh.metrics.records_read == 2 * tail  # two primaries
        assert fresh.diverged() == {}
        for name in ("p1", "p2"):
            assert replicas[name].state_digest() == primaries.digest(name)
        assert fresh.source_digests() == {n: primaries.digest(n) for n in ("p1", "p2")}

        # no snapshot at all: the start of every epoch is gone
        blind, blind_replicas = _follower(log, None)
        assert await blind.restore() is None
        first = (await log.beginning()).get(0)
        assert blind.lost_history[0][0] == 0
        assert blind.lost_history[0][1] >= first > 0
        for name in ("p1", "p2"):
            reason = blind.diverged()[name]
            assert "state unknown" in reason
            assert "partition 0 offsets 0.." in reason
            assert "removed by retention" in reason
            assert blind_replicas[name].diverged
        assert blind.source_digests() == {"p1": None, "p2": None}

        # a snapshot older than what the log holds: its sources are unknown too
        stale, _ = _follower(log, await store("early"))
        stale_from = await stale.restore()
        assert stale_from is not None
        assert stale.lost_history[0][0] == stale_from.position.get(0)
        assert set(stale.diverged()) == {"p1", "p2"}
        assert all("removed by retention" in r for r in stale.diverged().values())

        # p1 restarts (a new epoch): trusted again, and exact; p2 stays unknown
        model = primaries.models["p1"]
        await log.append_batch([record(model.start_epoch(uuid.uuid4().hex))])
        await log.append_batch([record(model.batch(model.store([9, 9, 9])))])
        await blind.catch_up()
        assert set(blind.diverged()) == {"p2"}
        assert blind_replicas["p1"].state_digest() == primaries.digest("p1")
    finally:
        for opened in stores:
            await opened.close()
