"""A Kafka snapshot store records the identity (the topic id) of the log its snapshots are of:
a follower of another topic, or of the same topic deleted and created again, is refused."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from consumers import (
    Follower,
    ForeignSnapshotError,
    KafkaSnapshotStore,
    ReplicaSet,
    open_snapshot_store,
)
from log import EventLog
from tests.consumers.primary_model import PrimaryModel, record
from tests.fixtures.kafka import KafkaLogFactory, fresh_topic
from tests.log.test_kafka_identity import delete_topic

pytestmark = pytest.mark.kafka

Opener = Callable[[], Awaitable[KafkaSnapshotStore]]


@pytest.fixture
async def open_store(kafka_bootstrap: str, request: pytest.FixtureRequest) -> AsyncIterator[Opener]:
    """Opens stores on one fresh snapshot topic; closes them after the test."""
    url = f"kafka://{kafka_bootstrap}/{fresh_topic(request)}-snaps?group=routers"
    opened: list[KafkaSnapshotStore] = []

    async def make() -> KafkaSnapshotStore:
        store = await open_snapshot_store(url)
        assert isinstance(store, KafkaSnapshotStore)
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.close()


async def fill(log: EventLog, batches: int) -> None:
    model = PrimaryModel("w")
    stream = [model.start_epoch()] + [model.batch(model.store([i, i + 1])) for i in range(batches)]
    await log.append_batch([record(b) for b in stream])


async def test_a_store_of_topic_t1_is_refused_for_t2_and_for_t1_recreated(
    kafka_log_factory: KafkaLogFactory,
    kafka_bootstrap: str,
    open_store: Opener,
    request: pytest.FixtureRequest,
) -> None:
    """Snapshots of T1 load for T1; a follower of T2 (more records: the position alone would
    pass) is refused, naming both topic ids; so is one of T1 after T1 was recreated."""
    t1 = await kafka_log_factory()
    await fill(t1, 20)
    writer = Follower(t1, [ReplicaSet()], snapshots=await open_store())
    await writer.catch_up()
    written = await writer.snapshot()
    id_t1 = await t1.identity()
    assert id_t1 is not None and written.log_identity == id_t1
    assert await Follower(t1, [ReplicaSet()], snapshots=await open_store()).restore() == written

    t2 = await kafka_log_factory(topic=fresh_topic(request))
    await fill(t2, 40)
    with pytest.raises(ForeignSnapshotError) as refused:
        await Follower(t2, [ReplicaSet()], snapshots=await open_store()).restore()
    id_t2 = await t2.identity()
    assert id_t2 is not None
    assert (refused.value.snapshot_log_id, refused.value.log_id) == (id_t1.log_id, id_t2.log_id)
    assert written.where in str(refused.value)

    topic = t1.topic
    await t1.close()
    await delete_topic(kafka_bootstrap, topic)
    recreated = await kafka_log_factory(topic=topic)
    await fill(recreated, 40)
    with pytest.raises(ForeignSnapshotError, match=id_t1.log_id):
        await Follower(recreated, [ReplicaSet()], snapshots=await open_store()).restore()
