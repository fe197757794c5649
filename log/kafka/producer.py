"""The writing side of ``KafkaLog``: an idempotent (optionally transactional) aiokafka producer.

Records are keyed by their key (the source id) and routed with Kafka's default partitioner
(murmur2, as the Java client), so every record of one key lands in one partition, in order. An
``append_batch`` is packed into record batches per partition (aiokafka's batch API: one future
per batch, not per record). aiokafka has at most one batch in flight per partition, and
idempotence (``enable_idempotence=True``, ``acks="all"``) makes its internal retries free of
duplicates. With a ``transactional_id``, appends are group-committed: concurrent appends share one
transaction, and a newer writer with the same id fences this one (its appends then fail with a
non-retriable ``LogWriteError``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from aiokafka import AIOKafkaProducer
from aiokafka import errors as kafka_errors
from aiokafka.partitioner import murmur2

from log.errors import LogClosedError, LogError, LogWriteError
from log.kafka.admin import RECORD_OVERHEAD_BYTES
from log.kafka.errors import is_kafka_error, translate
from log.kafka.options import KafkaOptions
from log.position import Position

logger = logging.getLogger(__name__)

EndOffsets = Callable[[Sequence[int]], Awaitable[dict[int, int]]]
_LSO_POLL_S = 0.005


def producer_kwargs(options: KafkaOptions) -> dict[str, Any]:
    """Keyword arguments of the ``AIOKafkaProducer`` behind a log with these options."""
    kwargs = options.client_kwargs()
    kwargs.update(
        enable_idempotence=True,
        acks="all",
        linger_ms=options.linger_ms,
        max_batch_size=options.max_batch_bytes,
        max_request_size=options.max_record_bytes + RECORD_OVERHEAD_BYTES,
    )
    if options.transactional_id is not None:
        kwargs["transactional_id"] = options.transactional_id
    return kwargs


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _check_records(
    records: Sequence[tuple[str, bytes]], max_record_bytes: int, where: str
) -> list[tuple[bytes, bytes]]:
    encoded = []
    for key, payload in records:
        if type(key) is not str:
            raise TypeError(f"key must be str, got {type(key).__name__}")
        if type(payload) is not bytes:
            raise TypeError(f"payload must be bytes, got {type(payload).__name__}")
        key_bytes = key.encode()
        if len(key_bytes) + len(payload) > max_record_bytes:
            raise LogWriteError(
                f"{where}: a record of {len(key_bytes) + len(payload)} bytes exceeds "
                f"max_record_bytes={max_record_bytes}",
                retriable=False,
            )
        encoded.append((key_bytes, payload))
    return encoded


class _Outgoing:
    """One record batch for one partition, and which of the caller's records it holds."""

    def __init__(self, partition: int, producer: AIOKafkaProducer) -> None:
        self.partition = partition
        self.builder = producer.create_batch()
        self.indices: list[int] = []
        self.future: asyncio.Future[Any] | None = None

    def add(self, index: int, key: bytes, payload: bytes) -> bool:
        """Append one record; False when the batch is full (an empty batch takes any record)."""
        if self.builder.append(key=key, value=payload, timestamp=None) is None:
            return False
        self.indices.append(index)
        return True

    def delivery(self) -> asyncio.Future[Any]:
        """The future aiokafka resolves once the broker acknowledged this batch."""
        assert self.future is not None, "batch not submitted"
        return self.future

    def place(self, metadata: Any, positions: list[Position | None], where: str) -> None:
        """Write each record's position (base offset + its place in the batch) into
        ``positions``."""
        if metadata.offset < 0:
            # Acknowledged as a duplicate of an earlier send after a long retry gap: stored,
            # but the broker did not say where.
            raise LogWriteError(
                f"{where}: acknowledged without an offset (stored once, position unknown); "
                "do not retry it",
                retriable=False,
            )
        for place, index in enumerate(self.indices):
            positions[index] = Position(((self.partition, metadata.offset + place),))


@dataclass(eq=False, slots=True)
class _Group:
    """Appends waiting for the next transaction (transactional mode only)."""

    records: list[tuple[bytes, bytes]]
    done: anyio.Event = field(default_factory=anyio.Event)
    positions: list[Position] = field(default_factory=list)
    error: LogError | None = None


class KafkaWriter:
    """Appends keyed records to one topic and returns their positions once acknowledged."""

    def __init__(self, options: KafkaOptions, end_offsets: EndOffsets) -> None:
        self._options = options
        self._topic = options.topic
        self._end_offsets = end_offsets
        self._producer = AIOKafkaProducer(**producer_kwargs(options))
        self._transactional = options.transactional_id is not None
        self._queue: list[_Group] = []
        self._commit_lock = anyio.Lock()
        self._fatal: LogError | None = None
        self._closed = False
        self._partition_ids: list[int] | None = None

    @property
    def _where(self) -> str:
        return f"topic {self._topic} at {self._options.bootstrap}: append"

    async def start(self) -> None:
        """Connect (and, with a transactional id, register it, fencing any older writer)."""
        try:
            with anyio.fail_after(self._options.request_timeout_s * 2):
                await self._producer.start()
        except TimeoutError:
            await self._producer.stop()
            raise translate(TimeoutError("producer start timed out"), self._where) from None
        except Exception as error:
            await self._producer.stop()
            if is_kafka_error(error):
                raise translate(error, self._where) from error
            raise

    async def close(self) -> None:
        """Flush what is buffered and disconnect; later appends raise ``LogClosedError``.

        Waits at most ``request_timeout_s`` for unacknowledged records (whose appends are still
        waiting), so closing never hangs on an unreachable cluster."""
        self._closed = True
        with anyio.move_on_after(self._options.request_timeout_s) as flushing:
            await self._producer.stop()
        if flushing.cancelled_caught:
            logger.warning(
                "%s: unacknowledged records not flushed within %gs; closed without them",
                self._where,
                self._options.request_timeout_s,
            )

    def _check_usable(self) -> None:
        if self._closed:
            raise LogClosedError(f"{self._where}: the log is closed")
        if self._fatal is not None:
            raise self._fatal

    async def append_batch(self, records: Sequence[tuple[str, bytes]]) -> list[Position]:
        """Append ``records`` in order; return each one's position once the broker acked all."""
        self._check_usable()
        encoded = _check_records(records, self._options.max_record_bytes, self._where)
        if not encoded:
            return []
        if self._transactional:
            # Bounded inside: each commit has its own deadline. An outer one could cancel a
            # caller whose records were committed, and a retry would duplicate them.
            return await self._append_in_transaction(encoded)
        try:
            with anyio.fail_after(self._options.append_timeout_s):
                return await self._send_and_wait(encoded)
        except TimeoutError:
            raise LogWriteError(
                f"{self._where}: not acknowledged within {self._options.append_timeout_s:g}s; "
                "the records may still be written",
                retriable=True,
            ) from None
        except Exception as error:
            if is_kafka_error(error):
                raise translate(error, self._where, writing=True) from error
            raise

    async def _send_and_wait(self, records: list[tuple[bytes, bytes]]) -> list[Position]:
        """Send ``records`` as few record batches as fit (one run per partition, in order) and
        return each record's position once all batches are acknowledged."""
        routes = await self._partitions_of({key for key, _ in records})
        open_batches: dict[int, _Outgoing] = {}
        sent: list[_Outgoing] = []
        try:
            for index, (key, payload) in enumerate(records):
                partition = routes[key]
                batch = open_batches.get(partition)
                if batch is None or not batch.add(index, key, payload):
                    if batch is not None:
                        sent.append(await self._submit(batch))
                    batch = open_batches[partition] = _Outgoing(partition, self._producer)
                    batch.add(index, key, payload)
            for batch in open_batches.values():
                sent.append(await self._submit(batch))
            positions: list[Position | None] = [None] * len(records)
            for batch in sent:
                batch.place(await batch.delivery(), positions, self._where)
        finally:
            for batch in sent:
                # Once one delivery failed the rest are not awaited; mark their outcome seen.
                batch.delivery().add_done_callback(_retrieve)
        return [p for p in positions if p is not None]

    async def _submit(self, batch: _Outgoing) -> _Outgoing:
        while True:
            try:
                batch.future = await self._producer.send_batch(
                    batch.builder, self._topic, partition=batch.partition
                )
                return batch
            except kafka_errors.KafkaTimeoutError:
                # Not queued: the partition's previous batch has not drained (or metadata is
                # late) within request_timeout_s. Nothing was sent, so trying again cannot
                # duplicate; append_timeout_s bounds the whole append.
                logger.debug("%s: batch not queued in time, queueing it again", self._where)

    async def _partitions_of(self, keys: set[bytes]) -> dict[bytes, int]:
        """The partition of each key: Kafka's default (murmur2) partitioner, as Java's."""
        if self._partition_ids is None:
            self._partition_ids = sorted(await self._producer.partitions_for(self._topic))
        ids = self._partition_ids
        return {key: ids[(murmur2(key) & 0x7FFFFFFF) % len(ids)] for key in keys}

    async def _append_in_transaction(self, records: list[tuple[bytes, bytes]]) -> list[Position]:
        group = _Group(records)
        self._queue.append(group)
        try:
            async with self._commit_lock:
                if not group.done.is_set():
                    batch, self._queue = self._queue, []
                    # A half-finished commit must not be abandoned: the transaction would
                    # stay open and block every read_committed reader.
                    with anyio.CancelScope(shield=True):
                        await self._commit(batch)
        except BaseException:
            if group in self._queue:
                self._queue.remove(group)
            raise
        if group.error is not None:
            raise group.error
        return group.positions

    async def _commit(self, groups: list[_Group]) -> None:
        """One transaction holding every record of ``groups``; each group gets its result."""
        try:
            with anyio.fail_after(self._options.append_timeout_s):
                self._check_usable()
                await self._producer.begin_transaction()
                try:
                    positions = await self._send_and_wait([r for g in groups for r in g.records])
                    await self._producer.commit_transaction()
                except BaseException:
                    await self._abort()
                    raise
                await self._wait_visible(positions)
        except Exception as error:
            failure = self._as_log_error(error)
            if self._fatal is None and self._producer_failed():
                self._fatal = failure
            for group in groups:
                group.error = failure
                group.done.set()
            return
        for group in groups:
            count = len(group.records)
            group.positions, positions = positions[:count], positions[count:]
            group.done.set()

    def _as_log_error(self, error: Exception) -> LogError:
        if isinstance(error, LogError):
            return error
        if isinstance(error, TimeoutError):
            return LogWriteError(
                f"{self._where}: transaction not committed within "
                f"{self._options.append_timeout_s:g}s",
                retriable=True,
            )
        if is_kafka_error(error):
            return translate(error, self._where, writing=True)
        return LogWriteError(f"{self._where}: {type(error).__name__}: {error}", retriable=False)

    def _producer_failed(self) -> bool:
        """True once aiokafka's transaction state is fatal (fenced, or an abort failed)."""
        # aiokafka exposes no public flag for this; the transaction manager is its own state.
        transactions = self._producer._txn_manager
        return transactions is None or bool(transactions.is_fatal_error())

    async def _abort(self) -> None:
        """Abort the open transaction; a writer that cannot abort is unusable from then on."""
        if self._producer_failed():
            return
        try:
            with anyio.fail_after(self._options.request_timeout_s, shield=True):
                await self._producer.abort_transaction()
        except Exception as error:
            logger.warning("%s: aborting the transaction failed: %r", self._where, error)
            self._fatal = self._as_log_error(error)

    async def _wait_visible(self, positions: list[Position]) -> None:
        """Wait until read_committed readers can see ``positions`` (the commit markers are
        written after the coordinator answers), so a read right after an append finds it."""
        last: dict[int, int] = {}
        for position in positions:
            for partition in position.partitions():
                last[partition] = max(last.get(partition, 0), position.get(partition))
        while True:
            ends = await self._end_offsets(sorted(last))
            if all(ends.get(p, 0) > offset for p, offset in last.items()):
                return
            await anyio.sleep(_LSO_POLL_S)
