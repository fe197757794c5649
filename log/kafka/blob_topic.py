"""``BlobTopic``: keyed blobs on a compacted Kafka topic (the last value of a key wins).

A generic piece with no idea of what the blobs mean: ``put`` writes ``(key, value)`` records
(``None`` writes a tombstone, which compaction turns into "no such key"), ``scan`` reads every
partition from its beginning to the end offsets taken when the scan began and yields each record
whose key has a given prefix, oldest first per partition. Compaction may have removed older
values of a key already, or not yet: a reader must take the last record of a key it sees.

The topic is created (unless it exists) with ``cleanup.policy=compact``, ``max.message.bytes``
large enough for ``max_record_bytes`` and ``segment.ms`` (default one hour: the active segment is
never compacted, so tombstoned values stay on disk at least that long). An existing topic must
be compacted (``ConfigError`` otherwise: time retention would delete what it holds);
``max_value_bytes`` follows its ``max.message.bytes``.

Writes go through an idempotent producer (``acks=all``), so a retried send is stored once;
``put`` returns once every record is acknowledged.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Self

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from log.closing import ClosesOnExit
from log.errors import ConfigError, LogClosedError
from log.kafka.admin import RECORD_OVERHEAD_BYTES, describe_topic_configs, ensure_topic
from log.kafka.errors import is_kafka_error, translate
from log.kafka.options import KafkaOptions
from log.kafka.producer import producer_kwargs
from log.kafka.reader import consumer_kwargs

logger = logging.getLogger(__name__)

DEFAULT_SEGMENT_MS = 3_600_000
_POLL_RECORDS = 500
_SCAN_FETCH_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class BlobRecord:
    """One record of the topic: its key, its value (None: a tombstone) and where it is."""

    key: str
    value: bytes | None
    partition: int
    offset: int


def compacted_topic_configs(options: KafkaOptions, segment_ms: int) -> dict[str, str]:
    """The topic-level settings a new blob topic is created with."""
    configs = {
        "cleanup.policy": "compact",
        "max.message.bytes": str(options.max_record_bytes + RECORD_OVERHEAD_BYTES),
        "segment.ms": str(segment_ms),
    }
    if options.min_insync_replicas is not None:
        configs["min.insync.replicas"] = str(options.min_insync_replicas)
    return configs


class BlobTopic(ClosesOnExit):
    """Keyed blobs on one compacted topic; open with ``BlobTopic.open(options)``."""

    def __init__(self, options: KafkaOptions, partitions: int, max_value_bytes: int) -> None:
        self._options = options
        self._partitions = [TopicPartition(options.topic, p) for p in range(partitions)]
        kwargs = producer_kwargs(options)
        # the topic's max.message.bytes bounds a whole record batch, not one record
        kwargs["max_batch_size"] = min(options.max_batch_bytes, max_value_bytes)
        self._producer = AIOKafkaProducer(**kwargs)
        self._max_value_bytes = max_value_bytes
        self._closed = False

    @classmethod
    async def open(
        cls, options: KafkaOptions, *, segment_ms: int = DEFAULT_SEGMENT_MS
    ) -> BlobTopic:
        """Create the compacted topic unless it exists (checking an existing one is compacted),
        and connect the producer."""
        if options.transactional_id is not None:
            raise ConfigError("transactional_id", "a blob topic writes without transactions")
        partitions = await ensure_topic(
            options, options.partitions, compacted_topic_configs(options, segment_ms)
        )
        configs = await describe_topic_configs(options)
        policy = configs.get("cleanup.policy", "")
        if "compact" not in policy.split(","):
            raise ConfigError(
                "topic",
                f"{options.topic!r} has cleanup.policy={policy!r}; a blob topic must be "
                "compacted (cleanup.policy=compact), or retention deletes what it holds",
            )
        topic_max = int(configs.get("max.message.bytes", "1048588"))
        max_value_bytes = min(options.max_record_bytes, topic_max - RECORD_OVERHEAD_BYTES)
        if max_value_bytes < 1024:
            raise ConfigError(
                "topic", f"{options.topic!r} has max.message.bytes={topic_max}: too small"
            )
        topic = cls(options, partitions, max_value_bytes)
        try:
            await topic._producer.start()
        except Exception as error:
            await topic.close()
            if is_kafka_error(error):
                raise translate(error, topic._where("connect")) from error
            raise
        return topic

    def _where(self, action: str) -> str:
        return f"topic {self._options.topic} at {self._options.bootstrap}: {action}"

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"{self.url} is closed")

    @property
    def url(self) -> str:
        """The ``kafka://`` URL of the topic (without secrets)."""
        return self._options.url

    @property
    def topic(self) -> str:
        """The topic's name."""
        return self._options.topic

    @property
    def max_value_bytes(self) -> int:
        """The largest value (key included) one record may carry on this topic."""
        return self._max_value_bytes

    async def put(self, items: Sequence[tuple[str, bytes | None]]) -> None:
        """Write the records in order (``None``: a tombstone); return once all are
        acknowledged by every in-sync replica."""
        self._check_open()
        for key, value in items:
            size = len(key.encode()) + (0 if value is None else len(value))
            if size > self._max_value_bytes:
                raise ConfigError(
                    "value",
                    f"a record of {size} bytes under {key!r} exceeds {self._max_value_bytes} "
                    f"(max.message.bytes of {self.topic})",
                )
        try:
            deliveries = [
                await self._producer.send(self.topic, value=value, key=key.encode())
                for key, value in items
            ]
            for delivery in deliveries:
                await delivery
        except Exception as error:
            if is_kafka_error(error):
                raise translate(error, self._where("put"), writing=True) from error
            raise

    async def scan(
        self,
        prefix: str = "",
        *,
        start: Mapping[int, int] | None = None,
        reached: dict[int, int] | None = None,
    ) -> AsyncIterator[BlobRecord]:
        """Every record whose key starts with ``prefix``, from ``start`` (per partition; default
        each partition's beginning, also where ``start`` lies before it) up to the end offsets
        taken now, oldest first per partition. Once the scan is done, ``reached`` (when given)
        holds those end offsets: where the next scan of what is new starts."""
        self._check_open()
        kwargs = consumer_kwargs(self._options)
        kwargs["isolation_level"] = "read_uncommitted"  # no transactions here; no LSO wait
        # whole blobs in few round trips: a fetch of one record batch at a time is slow
        kwargs["max_partition_fetch_bytes"] = _SCAN_FETCH_BYTES
        kwargs["fetch_max_bytes"] = _SCAN_FETCH_BYTES
        kwargs["check_crcs"] = False
        consumer = AIOKafkaConsumer(**kwargs)
        try:
            await consumer.start()
            consumer.assign(self._partitions)
            ends = await consumer.end_offsets(self._partitions)
            firsts = await consumer.beginning_offsets(self._partitions)
            for tp in self._partitions:
                consumer.seek(tp, max(firsts[tp], (start or {}).get(tp.partition, 0)))
            active = [tp for tp in self._partitions if await consumer.position(tp) < ends[tp]]
            while active:
                polled = await consumer.getmany(
                    *active, timeout_ms=self._options.poll_timeout_ms, max_records=_POLL_RECORDS
                )
                for tp, messages in polled.items():
                    for message in messages:
                        if message.offset >= ends[tp]:
                            break
                        key = message.key.decode(errors="replace") if message.key else ""
                        if key.startswith(prefix):
                            yield BlobRecord(key, message.value, tp.partition, message.offset)
                active = [tp for tp in active if await consumer.position(tp) < ends[tp]]
        except Exception as error:
            if is_kafka_error(error):
                raise translate(error, self._where("scan")) from error
            raise
        finally:
            await consumer.stop()
        if reached is not None:
            reached.update({tp.partition: offset for tp, offset in ends.items()})

    async def close(self) -> None:
        """Flush and stop the producer."""
        if self._closed:
            return
        self._closed = True
        await self._producer.stop()

    async def __aenter__(self) -> Self:
        self._check_open()
        return self
