"""``Publisher``: a cache's events, one batch per scheduler step, appended in order to a log.

``step()`` is synchronous and never blocks the serving loop. For a tree with a native recorder
(``SWARadixCache``) it only cuts what the tree recorded and numbers its batches; the recorder's
encoder thread hashes and encodes the cut steps in order without the GIL, so the serving loop
pays for neither (``swa_es.publish.feeds``). For any other cache it takes the events and encodes
them at once. One background task, the append task, collects the encoder's records when it
signals and appends the encoded batches to the log, several per ``append_batch`` call, strictly
in queue order (one task rather than a collector waking an appender: a task switch fewer per
round). The queue is bounded; when it is full the overflow policy decides (see
``OverflowPolicy``), and every overflow is counted.

Liveness (``cache.events.liveness``): the append task appends a heartbeat when it appended
nothing for ``PublisherConfig.heartbeat_s`` (only while the queue is empty, so the heartbeat's
seq is that of the last durable batch), and ``mark_offline`` queues an offline marker in order
with the batches; heartbeats then pause until the next batch or ``mark_online``.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Self

import anyio
from anyio.abc import TaskGroup, TaskStatus

from cache.events.liveness import encode_liveness, heartbeat, offline
from log import EventLog, LogError
from swa_es.publish.batching import BatchBuilder, PublishedCache, cache_meta
from swa_es.publish.config import PublisherConfig
from swa_es.publish.errors import PublisherClosedError, PublisherFailedError
from swa_es.publish.feeds import QueuedBatch, feed_for
from swa_es.publish.metrics import PublisherMetrics
from swa_es.publish.overflow import Backpressure, OverflowPolicy

logger = logging.getLogger(__name__)


class Publisher:
    """Publishes ``cache``'s events to ``log`` under the key ``source`` (an async context manager).

    ``config`` (a ``PublisherConfig``) bounds the queue and the batches, picks the overflow
    policy and the digest cadence, and sets retries and the close timeout. Retried appends may
    leave duplicates, which followers skip (they track ``(epoch, seq)``). Leaving the context
    cleanly takes a last step and flushes within ``config.close_timeout_s`` (else
    ``TimeoutError``); leaving it on an exception does not wait. ``step()``, ``flush()`` and
    ``wait_ready()`` must be called from the event loop's thread, and the serving loop must
    yield to the event loop (any ``await``) between steps, or the append task never runs and
    the queue overflows. ``meta`` replaces the epoch meta built from the cache (a bridge
    describes an engine it does not run); ``trusted_start=False`` opens the first epoch as
    unknown (``BatchBuilder.open_unknown_epoch``): followers distrust the source until a later
    epoch. Both, and ``publish_gap()``, are for sources whose events come from elsewhere; a
    cache with a native recorder (``SWARadixCache``) refuses ``trusted_start=False`` and
    ``publish_gap()`` with a ``ValueError``: it is its own source and loses nothing upstream.
    """

    def __init__(
        self,
        cache: PublishedCache,
        log: EventLog,
        source: str,
        *,
        config: PublisherConfig | None = None,
        meta: Mapping[str, Any] | None = None,
        trusted_start: bool = True,
    ) -> None:
        if type(source) is not str or not source:
            raise ValueError(f"source: expected a non-empty str, got {source!r}")
        # Not part of PublishedCache (a cache without the switch always records events).
        if getattr(cache, "events_enabled", True) is False:
            raise ValueError("cache: events are disabled (enable_events=False): nothing to publish")
        self.cache = cache
        self.log = log
        self.source = source
        self.config = config = PublisherConfig() if config is None else config
        self._builder = BatchBuilder(
            source,
            (
                cache_meta(cache, digest_every_batches=config.digest_every_batches)
                if meta is None
                else meta
            ),
            digest_every_batches=config.digest_every_batches,
            max_events_per_batch=config.max_events_per_batch,
            max_batch_bytes=config.max_batch_bytes,
            token_ids=config.token_ids,
        )
        self._feed = feed_for(cache, self._builder)
        if not trusted_start and not self._feed.upstream:
            raise ValueError(
                "trusted_start=False: this cache is its own source (a native recorder), so its "
                "first epoch is always known"
            )
        self._trusted_start = trusted_start
        self._metrics = PublisherMetrics(source, config.max_queue_batches)
        # Batches not yet handed to the log, in order; a cut step's wait for the worker's bytes.
        self._pending: deque[QueuedBatch] = deque()
        self._in_flight: Sequence[tuple[QueuedBatch, bytes]] = ()
        self._last_ticket = 0
        self._durable_ticket = 0
        self._progress = anyio.Event()
        # Tasks waiting on `_progress` (flush, wait_ready): with none, `_notify` has nothing to do.
        self._progress_waiters = 0
        self._work = anyio.Event()
        self._failure: BaseException | None = None
        self._running = False
        self._closing = False
        self._task_group: TaskGroup | None = None
        # liveness: whether heartbeats are on (off after mark_offline until the next batch),
        # and when the append task last appended anything (time.monotonic)
        self._online = True
        self._last_append_mono = time.monotonic()

    # --- public API -----------------------------------------------------------------------

    @property
    def epoch(self) -> str:
        """The id of the epoch being published (fresh per start and per resync)."""
        return self._builder.epoch

    @property
    def metrics(self) -> PublisherMetrics:
        """The live counters (one object, updated as the publisher works)."""
        return self._metrics

    @property
    def online(self) -> bool:
        """False after ``mark_offline`` until the next batch or ``mark_online``."""
        return self._online

    @property
    def ready(self) -> bool:
        """Whether ``step()`` would find room in the queue now."""
        return len(self._pending) < self.config.max_queue_batches

    def step(self) -> int:
        """Queue the cache's changes since the last step as one batch (or a few, for a huge
        step); never blocks.

        Returns the number of batches queued (0 for a step without events, which publishes
        nothing and never overflows). On a full queue: ``resync`` discards the queued batches
        and queues a new epoch holding the whole tree; ``block`` keeps the events for the next
        ``step()`` and raises ``Backpressure``. Raises ``PublisherFailedError`` once a
        background task has died.
        """
        if self._failure is not None or not self._running:
            self._check_usable()
        if len(self._pending) >= self.config.max_queue_batches:  # not ready
            return self._overflow() if self._feed.pending() else 0
        batches = self._feed.step()  # none when nothing is pending
        self._enqueue(batches)
        return len(batches)

    def publish_gap(self) -> None:
        """Tell followers that events were lost upstream: skip one seq and queue an empty batch
        (they mark the source diverged until the next epoch). The cache's pending events are
        discarded: they describe a state followers can no longer reach. ``ValueError`` for a
        cache with a native recorder, which has no upstream to lose events from."""
        self._check_usable()
        self._enqueue(self._feed.gap())

    def mark_offline(self, reason: str) -> None:
        """Queue an offline marker after every batch queued so far (it is durable once
        ``flush()`` returns) and pause heartbeats until the next batch or ``mark_online()``.
        Followers then answer the source as offline. Nothing when already marked offline."""
        self._check_usable()
        if not self._online:
            return
        self._online = False
        marker = offline(self.source, self.epoch, self._feed.last_seq, reason)
        self._last_ticket += 1
        self._pending.append(
            QueuedBatch(0, encode_liveness(marker), ticket=self._last_ticket, liveness=True)
        )
        self._metrics.queue_depth = len(self._pending)
        self._wake_worker()

    def mark_online(self) -> None:
        """Resume heartbeats after ``mark_offline`` (the source is alive though it publishes
        nothing); the next one is appended as soon as the queue is empty."""
        self._check_usable()
        if self._online:
            return
        self._online = True
        self._last_append_mono = -math.inf  # a heartbeat is due at once
        self._wake_worker()

    async def flush(self, timeout_s: float | None = None) -> None:
        """Return once every batch queued so far is durable (or superseded by a durable resync).

        Raises ``PublisherFailedError`` if the append task dies first, ``TimeoutError`` after
        ``timeout_s``.
        """
        self._check_usable()
        target = self._last_ticket
        with anyio.fail_after(timeout_s):
            while self._durable_ticket < target:
                self._feed.hurry()
                await self._wait_progress()

    async def wait_ready(self, timeout_s: float | None = None) -> None:
        """Return once the queue has room for a ``step()`` (the ``block`` policy's partner)."""
        self._check_usable()
        with anyio.fail_after(timeout_s):
            while not self.ready:
                self._feed.hurry()
                await self._wait_progress()

    # --- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._running or self._closing:
            raise PublisherClosedError(f"publisher {self.source!r} can be started only once")
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        try:
            self._feed.start()
            if self._trusted_start:
                self._open_epoch()
            else:
                self._open_unknown_epoch()
            await task_group.start(self._append_loop)
        except BaseException:
            task_group.cancel_scope.cancel()
            await task_group.__aexit__(None, None, None)
            self._feed.close()
            raise
        self._task_group = task_group
        self._running = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        task_group = self._task_group
        if task_group is None:
            return
        try:
            if exc_type is None:
                with anyio.fail_after(self.config.close_timeout_s):
                    await self._final_step()
                    if self.config.offline_on_close:
                        self.mark_offline("stopped")
                    await self.flush()
        finally:
            self._stop(task_group, abandon=exc_type is not None)
            try:
                await task_group.__aexit__(None, None, None)
            finally:
                self._task_group = None
                self._feed.close()

    async def _final_step(self) -> None:
        """Publish what the cache changed since the last ``step()``, waiting out backpressure."""
        while True:
            try:
                self.step()
                return
            except Backpressure:
                await self.wait_ready()

    def _stop(self, task_group: TaskGroup, *, abandon: bool) -> None:
        unflushed = len(self._pending) + len(self._in_flight)
        if abandon or unflushed:
            if unflushed:
                logger.warning(
                    "publisher %r stopping with %d batch(es) not durable", self.source, unflushed
                )
            task_group.cancel_scope.cancel()
        self._running = False
        self._closing = True
        self._wake_worker()
        self._notify()

    # --- queueing (event loop thread, synchronous) ----------------------------------------

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise PublisherFailedError(self.source, self._failure) from self._failure
        if not self._running:
            raise PublisherClosedError(
                f"publisher {self.source!r} is not running (use it inside `async with`)"
            )

    def _enqueue(self, batches: Sequence[QueuedBatch]) -> None:
        """Queue one step's (or opening's) batches: all encoded already, or all cut."""
        if not batches:
            return
        for batch in batches:
            self._last_ticket += 1
            batch.ticket = self._last_ticket
        self._online = True
        self._pending.extend(batches)
        self._metrics.batches_queued += len(batches)
        self._metrics.queue_depth = len(self._pending)
        # Wake the append task if it sleeps (for a cut step it then waits for the encoder's signal);
        # setting an event already set, or one nobody awaits, costs next to nothing.
        self._wake_worker()
        if batches[0].payload is None and 2 * len(self._pending) >= self.config.max_queue_batches:
            self._feed.hurry()

    def _open_epoch(self) -> None:
        # The opening covers every change not yet published: the feed drops those.
        self._enqueue(self._feed.reopen())
        self._metrics.epoch = self._builder.epoch
        self._metrics.epochs_started += 1

    def _open_unknown_epoch(self) -> None:
        self._enqueue(self._feed.reopen_unknown())
        self._metrics.epoch = self._builder.epoch
        self._metrics.epochs_started += 1

    def _overflow(self) -> int:
        metrics = self._metrics
        metrics.overflows += 1
        if self.config.overflow is OverflowPolicy.BLOCK:
            # The events stay where they are (the recorder, or the feed's carry) for later.
            metrics.backpressure += 1
            raise Backpressure(self.source, len(self._pending), self.config.max_queue_batches)
        discarded = [item for item in self._pending if not item.liveness]
        self._pending.clear()
        metrics.discarded_batches += len(discarded)
        metrics.discarded_events += sum(item.events for item in discarded)
        metrics.resyncs += 1
        old_epoch = self.epoch
        before = metrics.batches_queued
        self._open_epoch()
        logger.warning(
            "publisher %r: queue full, discarded %d batch(es) of epoch %s, resync as epoch %s",
            self.source,
            len(discarded),
            old_epoch,
            self.epoch,
        )
        self._notify()
        return metrics.batches_queued - before

    # --- the append task ------------------------------------------------------------------

    def _wake_worker(self) -> None:
        self._work.set()

    def _notify(self) -> None:
        # Called twice per append; an event is only worth making for someone waiting on it.
        if self._progress_waiters:
            self._progress.set()
            self._progress = anyio.Event()

    async def _wait_progress(self) -> None:
        event = self._progress
        self._progress_waiters += 1
        try:
            await event.wait()
        finally:
            self._progress_waiters -= 1
        if self._failure is not None:
            raise PublisherFailedError(self.source, self._failure) from self._failure
        if not self._running and self._durable_ticket < self._last_ticket:
            raise PublisherClosedError(f"publisher {self.source!r} stopped")

    def _appendable(self) -> bool:
        return bool(self._pending) and self._pending[0].payload is not None

    def _take_group(self) -> list[tuple[QueuedBatch, bytes]]:
        group: list[tuple[QueuedBatch, bytes]] = []
        size_bytes = 0
        while self._pending and len(group) < self.config.max_append_batch:
            payload = self._pending[0].payload
            if payload is None or (
                group and size_bytes + len(payload) > self.config.max_append_bytes
            ):
                break
            group.append((self._pending.popleft(), payload))
            size_bytes += len(payload)
        self._metrics.queue_depth = len(self._pending)
        return group

    def _fail(self, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc
        self._metrics.failed = True
        self._wake_worker()
        self._notify()

    async def _append_loop(
        self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Append what is encoded, in queue order; collect what the feed writes beside the loop
        (cut steps) as it comes; sleep when there is neither."""
        task_status.started()
        try:
            while self._failure is None:
                if self._appendable():
                    group = self._take_group()
                    self._in_flight = group
                    self._notify()
                    await self._append_group(group)
                    self._in_flight = ()
                    self._notify()
                elif self._closing:
                    return
                elif self._feed.writing():
                    await self._feed.wait_written()
                    self._feed.collect()
                elif self._heartbeat_due():
                    await self._append_heartbeat()
                else:
                    # No await between the checks and the wait: a step cannot slip in between.
                    self._work = anyio.Event()
                    wait_s = self._heartbeat_wait_s()
                    if not wait_s:  # None (no heartbeat due ever) or 0 (due once idle)
                        await self._work.wait()
                    else:
                        with anyio.move_on_after(wait_s):
                            await self._work.wait()
        except Exception as exc:
            logger.error("publisher %r: append task died: %r", self.source, exc)
            self._fail(exc)

    def _heartbeat_wait_s(self) -> float | None:
        """How long the idle append task may sleep before a heartbeat is due (None: never)."""
        every = self.config.heartbeat_s
        if every is None or not self._online:
            return None
        return max(0.0, self._last_append_mono + every - time.monotonic())

    def _heartbeat_due(self) -> bool:
        """Whether a heartbeat goes now: on, idle for ``heartbeat_s``, nothing queued (so the
        last batch numbered is durable and the heartbeat's seq is its seq)."""
        every = self.config.heartbeat_s
        return (
            every is not None
            and self._online
            and not self._closing
            and not self._pending
            and not self._feed.writing()
            and time.monotonic() - self._last_append_mono >= every
        )

    async def _append_heartbeat(self) -> None:
        """Append one heartbeat; a log error is counted and logged, never fatal (the next
        batch meets the same log and fails loudly)."""
        record = heartbeat(self.source, self.epoch, self._feed.last_seq)
        self._last_append_mono = time.monotonic()
        try:
            await self.log.append(self.source, encode_liveness(record))
        except LogError as exc:
            self._metrics.liveness_errors += 1
            logger.warning("publisher %r: heartbeat not appended: %r", self.source, exc)
            return
        self._metrics.heartbeats += 1

    async def _append_group(self, group: Sequence[tuple[QueuedBatch, bytes]]) -> None:
        records = [(self.source, payload) for _, payload in group]
        attempt = 0
        while True:
            try:
                await self.log.append_batch(records)
                break
            except LogError as exc:
                self._metrics.append_errors += 1
                if not exc.retriable or attempt >= self.config.append_retries:
                    raise
                self._metrics.append_retries += 1
                logger.warning("publisher %r: retrying append after %r", self.source, exc)
                await anyio.sleep(self.config.retry_backoff_s * math.pow(2, attempt))
                attempt += 1
        self._last_append_mono = time.monotonic()
        metrics = self._metrics
        metrics.appends += 1
        markers = sum(1 for item, _ in group if item.liveness)
        metrics.offline_markers += markers
        metrics.batches_published += len(group) - markers
        metrics.events_published += sum(item.events for item, _ in group)
        metrics.bytes_published += sum(len(payload) for _, payload in group)
        self._durable_ticket = group[-1][0].ticket
