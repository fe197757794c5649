"""KafkaLog against a real broker: ordering, positions, end detection, transactions, closing."""

from __future__ import annotations

from collections import defaultdict

import anyio
import pytest
from aiokafka import AIOKafkaProducer

from log import (
    ConfigError,
    EventLog,
    LogClosedError,
    LogWriteError,
    Position,
    Record,
    StartAt,
    open_log,
)
from log.kafka import KafkaLog
from tests.fixtures.kafka import KafkaLogFactory

pytestmark = pytest.mark.kafka


async def read_all(log: EventLog, start: StartAt = "beginning") -> list[Record]:
    """Every record of a non-follow read from ``start``."""
    return [record async for record in log.read(start)]


def by_key(records: list[Record]) -> dict[str, list[bytes]]:
    """Payloads grouped by key, in read order."""
    grouped: dict[str, list[bytes]] = defaultdict(list)
    for record in records:
        grouped[record.key].append(record.payload)
    return grouped


async def test_each_key_stays_in_order_in_one_partition(kafka_log_factory: KafkaLogFactory) -> None:
    """With several keys over several partitions, each key's records come back in append order,
    all from one partition, at the positions append returned."""
    log = await kafka_log_factory(partitions=4)
    keys = [f"worker-{i}" for i in range(7)]
    sent = [(keys[i % len(keys)], f"{keys[i % len(keys)]}:{i}".encode()) for i in range(700)]
    positions = []
    for start in range(0, len(sent), 100):
        positions += await log.append_batch(sent[start : start + 100])
    positions.append(await log.append("worker-0", b"worker-0:last"))
    sent.append(("worker-0", b"worker-0:last"))
    records = await read_all(log)
    assert len(records) == len(sent)
    expected: dict[str, list[bytes]] = defaultdict(list)
    for key, payload in sent:
        expected[key].append(payload)
    assert by_key(records) == expected
    partitions_of_key = defaultdict(set)
    for record in records:
        partitions_of_key[record.key].add(record.partition)
    assert all(len(parts) == 1 for parts in partitions_of_key.values())
    assert len({p for parts in partitions_of_key.values() for p in parts}) > 1
    found = {(r.key, r.payload): r.position for r in records}
    assert [found[item] for item in sent] == positions


async def test_resume_from_a_position_reads_exactly_the_rest(
    kafka_log_factory: KafkaLogFactory,
) -> None:
    """Reading from Position.after(record) (as a snapshot stores it, through JSON) yields exactly
    the records after it; end() is where the next record lands."""
    log = await kafka_log_factory(partitions=2)
    await log.append_batch([(f"k{i % 3}", b"%d" % i) for i in range(60)])
    records = await read_all(log)
    cut = records[25]
    stored = Position.from_json(Position.after(cut).to_json())
    for other in records[:25]:
        if other.partition != cut.partition:
            stored = stored.merged(Position.after(other))
    rest = await read_all(log, stored)
    consumed = {(r.partition, r.offset) for r in records[:26]}
    assert [(r.partition, r.offset) for r in rest] == [
        (r.partition, r.offset) for r in records if (r.partition, r.offset) not in consumed
    ]
    end = await log.end()
    assert await read_all(log, end) == []
    nxt = await log.append(cut.key, b"next")
    assert nxt == Position.of({cut.partition: end.get(cut.partition)})
    assert [r.payload for r in await read_all(log, end)] == [b"next"]


async def test_start_outside_the_log_is_a_config_error(kafka_log_factory: KafkaLogFactory) -> None:
    """A start position past the end, or naming a partition the topic lacks, raises ConfigError
    naming ``start`` instead of silently reading from elsewhere."""
    log = await kafka_log_factory(partitions=1)
    await log.append("k", b"one")
    with pytest.raises(ConfigError) as past_end:
        await read_all(log, Position.of({0: 5}))
    assert past_end.value.what == "start"
    with pytest.raises(ConfigError):
        await read_all(log, Position.of({3: 0}))


async def test_end_detection_with_transactions_and_gaps(kafka_log_factory: KafkaLogFactory) -> None:
    """With a transactional writer, a non-follow read stops at the end even though commit
    markers and an aborted transaction leave offset gaps; aborted records are never returned."""
    log = await kafka_log_factory(partitions=1, transactional_id="writer-tx-gaps")
    await log.append_batch([("src", b"a"), ("src", b"b")])
    await log.append("src", b"c")
    stray = AIOKafkaProducer(bootstrap_servers=log.bootstrap, transactional_id="stray")
    await stray.start()
    try:
        await stray.begin_transaction()
        await stray.send_and_wait(log.topic, b"aborted", key=b"src")
        await stray.abort_transaction()
    finally:
        await stray.stop()
    await log.append("src", b"d")
    records = await read_all(log)
    assert [r.payload for r in records] == [b"a", b"b", b"c", b"d"]
    offsets = [r.offset for r in records]
    assert offsets[-1] - offsets[0] > len(offsets) - 1  # there are gaps
    end = await log.end()
    assert end.get(0) > offsets[-1] + 1  # the last commit marker sits at the end
    assert await read_all(log, Position.after(records[-1])) == []


async def test_open_transaction_does_not_block_a_read(kafka_log_factory: KafkaLogFactory) -> None:
    """A read started while another writer's transaction is open returns what is committed and
    stops (at the last stable offset) instead of waiting for the transaction."""
    log = await kafka_log_factory(partitions=1, transactional_id="writer-open-tx")
    await log.append("src", b"committed")
    other = AIOKafkaProducer(bootstrap_servers=log.bootstrap, transactional_id="other")
    await other.start()
    try:
        await other.begin_transaction()
        await other.send_and_wait(log.topic, b"pending", key=b"src")
        with anyio.fail_after(30):
            assert [r.payload for r in await read_all(log)] == [b"committed"]
        await other.commit_transaction()
    finally:
        await other.stop()
    assert [r.payload for r in await read_all(log)] == [b"committed", b"pending"]


async def test_newer_writer_fences_the_old_one(kafka_log_factory: KafkaLogFactory) -> None:
    """Opening a second log with the same transactional_id fences the first: its appends fail
    with a non-retriable LogWriteError and none of its later records become visible."""
    old = await kafka_log_factory(partitions=1, transactional_id="writer-fence")
    await old.append("src", b"old-1")
    new = await kafka_log_factory(partitions=1, transactional_id="writer-fence")
    await new.append("src", b"new-1")
    with pytest.raises(LogWriteError) as fenced:
        await old.append("src", b"zombie")
    assert fenced.value.retriable is False
    assert "fenced" in str(fenced.value)
    with pytest.raises(LogWriteError):
        await old.append("src", b"zombie-2")
    assert [r.payload for r in await read_all(new)] == [b"old-1", b"new-1"]


async def test_concurrent_transactional_appends_share_commits(
    kafka_log_factory: KafkaLogFactory,
) -> None:
    """Many concurrent appends through one transactional log all succeed, each at its own
    position, and each task's records keep their order."""
    log = await kafka_log_factory(partitions=3, transactional_id="writer-concurrent")
    results: dict[str, list[Position]] = {}

    async def writer(key: str) -> None:
        results[key] = [await log.append(key, f"{key}:{i}".encode()) for i in range(15)]

    async with anyio.create_task_group() as tasks:
        for n in range(8):
            tasks.start_soon(writer, f"w{n}")
    records = await read_all(log)
    assert len(records) == 8 * 15
    for key, payloads in by_key(records).items():
        assert payloads == [f"{key}:{i}".encode() for i in range(15)]
    assert len({p for ps in results.values() for p in ps}) == 8 * 15


async def test_follow_sees_new_records_and_close_wakes_it(
    kafka_log_factory: KafkaLogFactory,
) -> None:
    """A follow read yields records appended after it began; closing the log makes the waiting
    reader fail with LogClosedError rather than hang."""
    log = await kafka_log_factory(partitions=2)
    await log.append("a", b"before")
    seen: list[bytes] = []
    failure: list[BaseException] = []
    got_two = anyio.Event()

    async def follow() -> None:
        try:
            async for record in log.read("beginning", follow=True):
                seen.append(record.payload)
                if len(seen) == 2:
                    got_two.set()
        except LogClosedError as error:
            failure.append(error)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(follow)
        await log.append("b", b"after")
        with anyio.fail_after(30):
            await got_two.wait()
        await log.close()
    assert sorted(seen) == [b"after", b"before"]
    assert len(failure) == 1
    with pytest.raises(LogClosedError):
        await log.append("a", b"late")


async def test_open_log_url_and_reopen(kafka_bootstrap: str) -> None:
    """open_log parses a kafka:// URL with options; a reopened log sees what was written and
    accepts pins; the URL it reports carries no password."""
    url = f"kafka://{kafka_bootstrap}/t-open-log-url-{id(object())}?partitions=2&linger_ms=0"
    async with await open_log(url, client_id="reopen-test") as log:
        assert isinstance(log, KafkaLog)
        first = await log.append("k", b"1")
        await log.pin("snapshot", first)
    async with await open_log(url) as again:
        assert [r.payload for r in await read_all(again)] == [b"1"]
        assert "partitions=2" in again.url
    with pytest.raises(ConfigError) as mismatch:
        await open_log(url.replace("partitions=2", "partitions=3"))
    assert mismatch.value.what == "partitions"


async def test_missing_topic_without_create_is_a_config_error(kafka_bootstrap: str) -> None:
    """create_topic=false on a topic that does not exist raises ConfigError naming the topic."""
    with pytest.raises(ConfigError) as missing:
        await open_log(f"kafka://{kafka_bootstrap}/t-never-created-xyz?create_topic=false")
    assert missing.value.what == "topic"


async def test_bad_payload_type_is_refused(kafka_log_factory: KafkaLogFactory) -> None:
    """A str payload is a TypeError before anything is sent."""
    log = await kafka_log_factory()
    with pytest.raises(TypeError):
        await log.append("k", "text")  # type: ignore[arg-type]  # deliberately wrong
    assert await read_all(log) == []
