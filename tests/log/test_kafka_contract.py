"""The backend contract (tests/log/contract.py) run against KafkaLog on a real broker."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest

from log import EventLog, Position, open_log
from tests.fixtures.kafka import close_all, factory_for, fresh_topic
from tests.log.contract import LogContract, LogFactory, read_all

pytestmark = pytest.mark.kafka


async def _contract_factory(
    bootstrap: str, request: pytest.FixtureRequest, **options: Any
) -> AsyncIterator[LogFactory]:
    """A factory opening a log on a fresh topic per call; closes what is left after the test."""
    make, opened = factory_for(bootstrap, request)
    counter = itertools.count()
    base = fresh_topic(request)

    async def factory() -> EventLog:
        return await make(topic=f"{base}-{next(counter)}", **options)

    yield factory
    await close_all(opened)


class TestKafkaLogContract(LogContract):
    """KafkaLog, one partition, idempotent producer."""

    @pytest.fixture
    async def log_factory(
        self, kafka_bootstrap: str, request: pytest.FixtureRequest
    ) -> AsyncIterator[LogFactory]:
        """A fresh one-partition topic per call."""
        async for factory in _contract_factory(kafka_bootstrap, request, partitions=1):
            yield factory


class TestKafkaLogThreePartitionsContract(LogContract):
    """KafkaLog, three partitions (keys spread over them)."""

    @pytest.fixture
    async def log_factory(
        self, kafka_bootstrap: str, request: pytest.FixtureRequest
    ) -> AsyncIterator[LogFactory]:
        """A fresh three-partition topic per call."""
        async for factory in _contract_factory(kafka_bootstrap, request, partitions=3):
            yield factory


class TestTransactionalKafkaLogContract(LogContract):
    """KafkaLog with a transactional id (group-committed transactions, commit-marker gaps)."""

    @pytest.fixture
    async def log_factory(
        self, kafka_bootstrap: str, request: pytest.FixtureRequest
    ) -> AsyncIterator[LogFactory]:
        """A fresh topic and a fresh transactional id per call."""
        ids = itertools.count()
        base = fresh_topic(request)
        make, opened = factory_for(kafka_bootstrap, request)

        async def factory() -> EventLog:
            n = next(ids)
            return await make(topic=f"{base}-{n}", transactional_id=f"{base}-writer-{n}")

        yield factory
        await close_all(opened)

    # Each transaction ends with a commit marker that takes one offset, so "the next record
    # lands at last + 1" becomes "at last + 2" here; these two tests say so instead.

    async def test_end_is_after_last_record(self, log_factory: LogFactory) -> None:
        """end() is where the next record lands: past the last record and its commit marker."""
        async with await log_factory() as log:
            positions = [await log.append("src", b"p") for _ in range(5)]
            end = await log.end()
            (partition,) = positions[-1].partitions()
            assert end.get(partition) == positions[-1].get(partition) + 2
            assert end.covers(Position.after((await read_all(log))[-1]))
            assert await log.append("src", b"next") == Position.of({partition: end.get(partition)})

    async def test_reopen_keeps_records(self, log_factory: LogFactory) -> None:
        """Records survive close and reopen through the log's own URL (same transactional id);
        appends continue after the last commit marker."""
        async with await log_factory() as log:
            positions = await log.append_batch([("src", b"a"), ("src", b"b")])
            url = log.url
        async with await open_log(url) as again:
            records = await read_all(again)
            assert [r.payload for r in records] == [b"a", b"b"]
            assert [r.position for r in records] == positions
            after = await again.append("src", b"c")
            (partition,) = positions[-1].partitions()
            assert after.get(partition) == positions[-1].get(partition) + 2
