"""``KafkaLog``: the ``EventLog`` contract on a Kafka topic, through aiokafka (asyncio only).

Positions are Kafka's own (partition -> offset). ``pin`` is accepted and ignored: retention of a
Kafka topic is the broker's (the log creates its topic with ``retention.ms=-1``, so nothing is
deleted unless an operator sets retention). Its identity (``identity()``) is the topic's id.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import aclosing
from typing import Any, Self

from aiokafka import AIOKafkaConsumer, TopicPartition

from log.base import records_of
from log.closing import ClosesOnExit
from log.errors import LogClosedError
from log.identity import LogIdentity
from log.kafka.admin import ensure_topic
from log.kafka.errors import is_kafka_error, translate
from log.kafka.options import KafkaOptions, parse_options
from log.kafka.producer import KafkaWriter
from log.kafka.reader import consumer_kwargs, record_lists_until, seek_to_start
from log.kafka.topic_id import fetch_topic_id
from log.position import Position, Record, StartAt

logger = logging.getLogger(__name__)


class KafkaLog(ClosesOnExit):
    """An ordered, durable log on one Kafka topic; open it with ``KafkaLog.open`` or
    ``open_log("kafka://host:port/topic?...")``."""

    def __init__(self, options: KafkaOptions, partitions: int) -> None:
        self._options = options
        self._partitions = [TopicPartition(options.topic, p) for p in range(partitions)]
        self._offsets = AIOKafkaConsumer(**consumer_kwargs(options))
        self._writer = KafkaWriter(options, self._end_offsets_of)
        self._readers: set[AIOKafkaConsumer] = set()
        self._closed = False
        self._identity: LogIdentity | None = None
        self._identity_asked = False

    @classmethod
    async def open_url(cls, netloc: str, path: str, options: dict[str, Any]) -> KafkaLog:
        """Open the log of ``kafka://<netloc><path>`` with ``options`` (query or keywords)."""
        return await cls.open(parse_options(netloc, path, options))

    @classmethod
    async def open(cls, options: KafkaOptions) -> KafkaLog:
        """Create the topic unless it exists, connect the producer and the offsets client."""
        partitions = await ensure_topic(options, options.partitions)
        log = cls(options, partitions)
        try:
            await log._start()
        except BaseException:
            await log.close()
            raise
        return log

    async def _start(self) -> None:
        try:
            await self._offsets.start()
        except Exception as error:
            if is_kafka_error(error):
                raise translate(error, self._where("connect")) from error
            raise
        await self._writer.start()

    def _where(self, action: str) -> str:
        return f"topic {self._options.topic} at {self._options.bootstrap}: {action}"

    @property
    def url(self) -> str:
        """The ``kafka://`` URL of this log (without secrets)."""
        return self._options.url

    @property
    def topic(self) -> str:
        """The Kafka topic holding this log."""
        return self._options.topic

    @property
    def bootstrap(self) -> str:
        """The bootstrap servers, comma-separated."""
        return self._options.bootstrap

    @property
    def partition_count(self) -> int:
        """How many partitions the topic has."""
        return len(self._partitions)

    async def identity(self) -> LogIdentity | None:
        """The topic's id (``log.kafka.topic_id``): a topic deleted and created again under
        the same name has another. None from a broker too old to report topic ids."""
        self._check_open()
        if not self._identity_asked:
            topic_id = await fetch_topic_id(self._options)
            self._identity = None if topic_id is None else LogIdentity(topic_id)
            self._identity_asked = True
        return self._identity

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"{self.url} is closed")

    async def append(self, key: str, payload: bytes) -> Position:
        """Append one record; return its position once every in-sync replica has it."""
        (position,) = await self.append_batch([(key, payload)])
        return position

    async def append_batch(self, records: Sequence[tuple[str, bytes]]) -> list[Position]:
        """Append records in order (one transaction with a ``transactional_id``); return each
        one's position once all are acknowledged."""
        self._check_open()
        return await self._writer.append_batch(records)

    async def _end_offsets_of(self, partitions: Sequence[int]) -> dict[int, int]:
        tps = [self._partitions[p] for p in partitions]
        try:
            ends = await self._offsets.end_offsets(tps)
        except Exception as error:
            if is_kafka_error(error):
                raise translate(error, self._where("end offsets")) from error
            raise
        return {tp.partition: offset for tp, offset in ends.items()}

    async def end(self) -> Position:
        """Where the next committed record of each partition will land (the last stable
        offset, which is the high watermark when no transaction is open)."""
        self._check_open()
        return Position.of(await self._end_offsets_of(range(len(self._partitions))))

    async def beginning(self) -> Position:
        """The first offset each partition still holds (past what retention deleted)."""
        self._check_open()
        try:
            firsts = await self._offsets.beginning_offsets(self._partitions)
        except Exception as error:
            if is_kafka_error(error):
                raise translate(error, self._where("beginning offsets")) from error
            raise
        return Position.of({tp.partition: offset for tp, offset in firsts.items()})

    def read(self, start: StartAt = "beginning", *, follow: bool = False) -> AsyncIterator[Record]:
        """Committed records from ``start`` (inclusive), partition by partition in offset order.
        Without ``follow`` stop at the end offsets taken now; with it, wait for new records until
        cancelled or the log is closed."""
        return records_of(self.read_batches(start, follow=follow))

    async def read_batches(
        self, start: StartAt = "beginning", *, follow: bool = False
    ) -> AsyncGenerator[list[Record], None]:
        """``read``, as the non-empty lists of one partition's records each poll returned."""
        self._check_open()
        consumer = AIOKafkaConsumer(**consumer_kwargs(self._options))
        self._readers.add(consumer)
        try:
            async for records in self._read_with(consumer, start, follow):
                yield records
        finally:
            self._readers.discard(consumer)
            await consumer.stop()

    async def _read_with(
        self, consumer: AIOKafkaConsumer, start: StartAt, follow: bool
    ) -> AsyncGenerator[list[Record], None]:
        try:
            await consumer.start()
            consumer.assign(self._partitions)
            stop_at = None if follow else await consumer.end_offsets(self._partitions)
            await seek_to_start(consumer, self._partitions, start)
            async with aclosing(record_lists_until(consumer, self._options, stop_at)) as polls:
                async for records in polls:
                    yield records
        except Exception as error:
            if self._closed:
                raise LogClosedError(f"{self.url} was closed while reading") from error
            if is_kafka_error(error):
                raise translate(error, self._where("read")) from error
            raise

    async def pin(self, name: str, position: Position | None) -> None:
        """Accepted and ignored: a Kafka topic's retention is the broker's to decide."""
        self._check_open()

    async def close(self) -> None:
        """Flush and stop the producer, stop every reader (they raise ``LogClosedError``)."""
        if self._closed:
            return
        self._closed = True
        for reader in list(self._readers):
            await reader.stop()
        await self._writer.close()
        await self._offsets.stop()

    async def __aenter__(self) -> Self:
        self._check_open()
        return self
