"""The reading side of ``KafkaLog``: a group-less, read_committed consumer per ``read`` call.

A read assigns every partition of the topic and seeks each to its start. Without ``follow`` it
stops once the consumer's *position* in every partition reaches the end offset taken when the
read began (the last stable offset under read_committed). Comparing positions, not "last record
offset + 1", is what makes it terminate: transaction markers and aborted records leave gaps.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from log.errors import ConfigError, CorruptRecordError
from log.kafka.admin import RECORD_OVERHEAD_BYTES
from log.kafka.options import KafkaOptions
from log.position import Position, Record, StartAt

_MAX_POLL_RECORDS = 2000


def consumer_kwargs(options: KafkaOptions) -> dict[str, Any]:
    """Keyword arguments of the ``AIOKafkaConsumer`` behind reads and ``end()``."""
    kwargs = options.client_kwargs()
    kwargs.update(
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        # Never jump silently: an out-of-range position is an error, not a reset.
        auto_offset_reset="none",
        max_partition_fetch_bytes=max(
            1024 * 1024, options.max_record_bytes + RECORD_OVERHEAD_BYTES
        ),
        fetch_max_wait_ms=options.poll_timeout_ms,
    )
    return kwargs


def to_record(topic: str, message: ConsumerRecord[bytes, bytes]) -> Record:
    """The log ``Record`` of one consumed Kafka message (checked: str key, bytes payload)."""
    segment = f"{topic}-{message.partition}"
    if message.value is None:
        raise CorruptRecordError(segment, message.offset, "null payload (not written by a log)")
    try:
        key = message.key.decode() if message.key is not None else ""
    except UnicodeDecodeError:
        raise CorruptRecordError(segment, message.offset, "key is not UTF-8") from None
    return Record(message.partition, message.offset, key, message.value, message.timestamp / 1000)


async def seek_to_start(
    consumer: AIOKafkaConsumer, partitions: Sequence[TopicPartition], start: StartAt
) -> None:
    """Position ``consumer`` on every partition at ``start`` (inclusive)."""
    if start == "beginning":
        await consumer.seek_to_beginning(*partitions)
        return
    if start == "end":
        await consumer.seek_to_end(*partitions)
        return
    if not isinstance(start, Position):
        raise ConfigError("start", f"expected 'beginning', 'end' or a Position, got {start!r}")
    named = set(start.partitions())
    unknown = named - {tp.partition for tp in partitions}
    if unknown:
        raise ConfigError("start", f"partitions {sorted(unknown)} are not in the topic")
    firsts = await consumer.beginning_offsets(list(partitions))
    lasts = await consumer.end_offsets(list(partitions))
    for tp in partitions:
        if tp.partition not in named:
            consumer.seek(tp, firsts[tp])
            continue
        offset = start.get(tp.partition)
        if offset < firsts[tp]:
            raise ConfigError(
                "start",
                f"offset {offset} of partition {tp.partition} was removed by retention "
                f"(the partition starts at {firsts[tp]})",
            )
        if offset > lasts[tp]:
            raise ConfigError(
                "start", f"offset {offset} is past the end {lasts[tp]} of partition {tp.partition}"
            )
        consumer.seek(tp, offset)


async def _unfinished(
    consumer: AIOKafkaConsumer, stop_at: dict[TopicPartition, int]
) -> list[TopicPartition]:
    return [tp for tp, end in stop_at.items() if await consumer.position(tp) < end]


async def record_lists_until(
    consumer: AIOKafkaConsumer,
    options: KafkaOptions,
    stop_at: dict[TopicPartition, int] | None,
) -> AsyncGenerator[list[Record], None]:
    """Records from the consumer's positions on (up to ``stop_at`` per partition, or forever
    when it is None), as non-empty lists: each partition's records of one poll. A message that
    is not a log's record raises ``CorruptRecordError`` after the good ones before it."""
    topic, poll_ms = options.topic, options.poll_timeout_ms
    partitions = list(consumer.assignment())
    active = partitions if stop_at is None else await _unfinished(consumer, stop_at)
    while active:
        batches = await consumer.getmany(*active, timeout_ms=poll_ms, max_records=_MAX_POLL_RECORDS)
        for tp, messages in batches.items():
            limit = None if stop_at is None else stop_at[tp]
            records: list[Record] = []
            try:
                for message in messages:
                    if limit is not None and message.offset >= limit:
                        break
                    records.append(to_record(topic, message))
            except CorruptRecordError:
                if records:
                    yield records
                raise
            if records:
                yield records
        if stop_at is not None:
            active = await _unfinished(consumer, stop_at)
            consumer.pause(*(tp for tp in partitions if tp not in active))
