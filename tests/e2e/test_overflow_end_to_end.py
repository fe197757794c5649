"""Overflow end to end: a deliberately slow real log makes the publisher overflow; `resync`
still leaves the follower equal to the primary, and `block` hands the caller Backpressure."""

from __future__ import annotations

import anyio

from consumers import ReplicaSet
from log import EventLog
from swa_es import Backpressure, Publisher, PublisherConfig
from swa_es.testing import SlowLog
from tests.e2e.harness import Primary, follow, make_workload


async def _replica_digest(log: EventLog, source: str) -> str | None:
    replicas = ReplicaSet()
    await follow(log, replicas)
    return replicas[source].state_digest()


async def test_resync_after_overflow_leaves_the_follower_equal(event_log: EventLog) -> None:
    """While the log is held the queue overflows and resyncs; the replica still ends equal."""
    primary = Primary.create("worker-0", "cpu")
    workload = make_workload(seed=21)
    slow = SlowLog(event_log, held=True)
    async with Publisher(
        primary.cache, slow, primary.source, config=PublisherConfig(max_queue_batches=8)
    ) as pub:
        await slow.wait_blocked()
        for i in range(120):
            if i == 60:
                slow.release()
            primary.serve(workload.next_request())
            pub.step()
            await anyio.lowlevel.checkpoint()
    m = pub.metrics
    assert m.overflows >= 1 and m.resyncs == m.overflows
    assert m.discarded_batches >= 8 and m.epochs_started == 1 + m.resyncs
    assert await _replica_digest(event_log, primary.source) == primary.cache.state_digest()


async def test_block_policy_hands_the_caller_backpressure(event_log: EventLog) -> None:
    """Under `block` a held log makes step() raise Backpressure; the caller waits and loses
    nothing: the replica ends equal after the log is released."""
    primary = Primary.create("worker-0", "cpu")
    workload = make_workload(seed=22)
    slow = SlowLog(event_log, held=True, append_delay_s=0.001)
    pressured = 0
    async with Publisher(
        primary.cache,
        slow,
        primary.source,
        config=PublisherConfig(max_queue_batches=4, overflow="block"),
    ) as pub:
        await slow.wait_blocked()
        for _ in range(60):
            primary.serve(workload.next_request())
            try:
                pub.step()
            except Backpressure:
                pressured += 1
                if slow.held:
                    slow.release()
                await pub.wait_ready()
            await anyio.lowlevel.checkpoint()
    assert pressured >= 1 and pub.metrics.backpressure == pressured
    assert pub.metrics.resyncs == 0 and pub.metrics.epochs_started == 1
    assert await _replica_digest(event_log, primary.source) == primary.cache.state_digest()
