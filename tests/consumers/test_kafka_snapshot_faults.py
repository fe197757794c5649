"""Faults of the Kafka snapshot store on a real broker: a writer killed mid-snapshot, a chunk
corrupted on the topic, two followers of one group writing at once, groups sharing a topic."""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import pytest

from consumers import Follower, KafkaSnapshotStore, ReplicaSet, open_snapshot_store
from consumers.snapshots.chunks import chunk_key, encode_chunk, parse_key
from log import Position
from tests.consumers.primary_model import PrimaryModel, record
from tests.fixtures.kafka import KafkaLogFactory, fresh_topic

pytestmark = pytest.mark.kafka

Opener = Callable[..., Awaitable[KafkaSnapshotStore]]


@pytest.fixture
async def snapshot_url(kafka_bootstrap: str, request: pytest.FixtureRequest) -> str:
    """A fresh snapshot topic (small records, so snapshots span several chunks)."""
    return f"kafka://{kafka_bootstrap}/{fresh_topic(request)}?max_record_bytes=4096"


@pytest.fixture
async def open_store(snapshot_url: str) -> AsyncIterator[Opener]:
    """Opens Kafka snapshot stores on the test's topic; closes them after the test."""
    opened: list[KafkaSnapshotStore] = []

    async def make(group: str = "routers", **options: Any) -> KafkaSnapshotStore:
        store = await open_snapshot_store(snapshot_url, group=group, **options)
        assert isinstance(store, KafkaSnapshotStore)
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.close()


async def test_a_writer_killed_mid_snapshot_leaves_it_ignored(
    snapshot_url: str, open_store: Opener
) -> None:
    """A process SIGKILLed while writing chunks (before its manifest) leaves chunks no manifest
    names: readers take the older complete snapshot; a later write tombstones the leftovers."""
    store = await open_store()
    complete = await store.write(Position.of({0: 5}), {}, {"v": b"complete" * 100})
    child = await anyio.open_process(
        [sys.executable, "-m", "tests.consumers.snapshot_writer_child", snapshot_url, "routers"]
    )
    assert child.stdout is not None
    with anyio.fail_after(60):
        line = await child.stdout.receive()
    assert line.startswith(b"chunks acknowledged"), line
    child.send_signal(signal.SIGKILL)
    await child.wait()
    reader = await open_store()
    found = await reader.newest_valid(["v"])
    assert found is not None
    assert found.info == complete
    orphans = {
        parse_key("routers", r.key).snap  # type: ignore[union-attr]
        async for r in reader.topic.scan("routers/")
        if r.value is not None and "/chunk/" in r.key
    }
    assert len(orphans) == 2  # the complete snapshot's chunks and the killed writer's
    for offset in (6, 7, 8):  # past the killed writer's generation, it is pruned too
        await reader.write(Position.of({0: offset}), {}, {"v": b"x"})
    kept = {info.name.split("/")[1] for info in await reader.infos()}
    live = {}
    async for r in reader.topic.scan("routers/"):
        live[r.key] = r.value
    assert {k.split("/")[1] for k, v in live.items() if v is not None} == kept


async def test_a_corrupted_chunk_falls_back_to_the_older_snapshot(
    open_store: Opener, caplog: pytest.LogCaptureFixture
) -> None:
    """A chunk whose bytes were damaged on the topic fails its checksum: the newest snapshot
    is skipped with a warning naming the chunk, and the one before it is used."""
    store = await open_store(keep=5)
    older = await store.write(Position.of({0: 1}), {}, {"v": b"older" * 2000})
    newer = await store.write(Position.of({0: 2}), {}, {"v": b"newer" * 2000})
    snap = newer.name.split("/")[1]
    damaged = bytearray(encode_chunk(b"x" * 100))
    damaged[-1] ^= 0xFF
    await store.topic.put([(chunk_key("routers", snap, 1), bytes(damaged))])
    with caplog.at_level(logging.WARNING):
        found = await (await open_store()).newest_valid(["v"])
    assert found is not None
    assert found.info == older
    assert f"routers/{snap}" in caplog.text
    assert "chunk 1: chunk checksum mismatch" in caplog.text
    # a chunk replaced by a well-formed chunk of other bytes is refused too
    await store.topic.put([(chunk_key("routers", snap, 1), bytes(damaged))])
    await store.topic.put([(chunk_key("routers", snap, 1), encode_chunk(b"y" * 100))])
    found = await (await open_store()).newest_valid(["v"])
    assert found is not None
    assert found.info == older


async def test_two_followers_of_one_group_snapshot_at_once(
    kafka_log_factory: KafkaLogFactory, open_store: Opener
) -> None:
    """Two followers of one log, each with its own store instance of one group, snapshot
    while both follow: every snapshot kept loads, and a third follower restores the primary's
    exact state from the newest."""
    log = await kafka_log_factory(partitions=1)
    model = PrimaryModel("w")
    await log.append_batch([record(model.start_epoch())])
    followers = [
        Follower(log, [ReplicaSet()], snapshots=await open_store(keep=4), snapshot_every_batches=3)
        for _ in range(2)
    ]
    for round_ in range(4):
        batches = [model.batch(model.store([round_, step, step + 1])) for step in range(4)]
        await log.append_batch([record(b) for b in batches])
        async with anyio.create_task_group() as tasks:
            for follower in followers:
                tasks.start_soon(follower.catch_up)
    async with anyio.create_task_group() as tasks:
        for follower in followers:
            tasks.start_soon(follower.snapshot)
    reader = await open_store()
    infos = await reader.infos()
    # keep=4, plus at most one per other writer that wrote at the same moment (each pruned
    # what it knew of); the next write prunes the rest
    assert 4 <= len(infos) <= 5
    writers = {info.name.split("-")[-1] for info in infos}
    assert writers <= {follower.store.writer for follower in followers}  # type: ignore[union-attr]
    for info in infos:
        loaded = await reader.newest_valid(["replicas"], older_than=info.generation + 1)
        assert loaded is not None
    replicas = ReplicaSet()
    fresh = Follower(log, [replicas], snapshots=reader)
    restored = await fresh.restore()
    assert restored is not None
    assert fresh.metrics.records_read == 0
    assert replicas["w"].state_digest() == model.digest.hexdigest()
    assert restored.digests == {"w": model.digest.hexdigest()}
    await followers[0].snapshot()
    assert len(await reader.infos()) == 4


async def test_groups_sharing_a_topic_never_see_each_other(open_store: Opener) -> None:
    """Snapshots are keyed by group: one group's writes, prunes and reads leave another's be."""
    red, blue = await open_store("red", keep=1), await open_store("blue", keep=1)
    kept_blue = await blue.write(Position.of({0: 1}), {}, {"v": b"blue"})
    for offset in range(3):
        await red.write(Position.of({0: offset}), {}, {"v": b"red"})
    found = await (await open_store("blue")).newest_valid(["v"])
    assert found is not None
    assert found.info == kept_blue
    assert [i.position for i in await red.infos()] == [Position.of({0: 2})]


async def test_an_existing_topic_that_is_not_compacted_is_refused(
    kafka_log_factory: KafkaLogFactory, kafka_bootstrap: str
) -> None:
    """Pointing the store at a delete-policy topic (an event log, say) is a clear error."""
    log = await kafka_log_factory()
    with pytest.raises(Exception, match=r"cleanup\.policy"):
        await open_snapshot_store(f"kafka://{kafka_bootstrap}/{log.topic}")
