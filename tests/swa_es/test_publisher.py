"""The publisher against a fake cache and a real in-memory log: numbering, flushing, overflow."""

from __future__ import annotations

import random

import anyio
import anyio.lowlevel
import pytest

from cache.events import AllBlocksCleared, BlockStored, BlockSWAEvicted, decode_batch
from log import LogUnavailableError, LogWriteError, MemoryLog
from swa_es import (
    Backpressure,
    OverflowPolicy,
    Publisher,
    PublisherClosedError,
    PublisherConfig,
    PublisherFailedError,
)
from swa_es.testing import FailingLog, SlowLog
from tests.swa_es.doubles import FakeCache, random_mutation, replay


def _chain(cache: FakeCache, start: int, length: int) -> None:
    parent: int | None = None
    for h in range(start, start + length):
        cache.store(h, parent)
        parent = h


async def test_first_batch_opens_the_epoch_with_the_whole_tree() -> None:
    """The epoch's first batch is AllBlocksCleared + the current tree, with meta and a digest."""
    cache = FakeCache(page_size=2, sliding_window_size=8)
    _chain(cache, 1, 3)
    cache.tombstone(2)
    log = MemoryLog()
    async with Publisher(cache, log, source="w0") as pub:
        assert cache.events == [], "events buffered before the start are covered by the opening"
        await pub.flush()
    records = [r async for r in log.read()]
    assert len(records) == 1
    batch = decode_batch(records[0].payload)
    assert records[0].key == "w0"
    assert batch.seq == 0 and batch.source == "w0" and batch.epoch == pub.epoch
    assert batch.events[0] == AllBlocksCleared()
    stored = [e for e in batch.events if isinstance(e, BlockStored)]
    assert [e.block_hashes[0] for e in stored] == [1, 2, 3]
    assert BlockSWAEvicted((2,)) in batch.events
    assert batch.meta is not None
    assert batch.meta["page_size"] == 2 and batch.meta["sliding_window_size"] == 8
    assert batch.meta["device"] == "cpu"
    assert batch.digest == cache.state_digest()


async def test_steps_number_batches_and_skip_empty_steps() -> None:
    """Each non-empty step is one batch with the next seq; an empty step publishes nothing."""
    cache = FakeCache()
    log = MemoryLog()
    async with Publisher(cache, log, source="w0") as pub:
        cache.store(10)
        assert pub.step() == 1
        assert pub.step() == 0
        cache.store(11, 10)
        cache.tombstone(10)
        assert pub.step() == 1
    batches = [decode_batch(r.payload) for r in [r async for r in log.read()]]
    assert [b.seq for b in batches] == [0, 1, 2]
    assert {b.epoch for b in batches} == {pub.epoch}
    assert [len(b.events) for b in batches] == [1, 1, 2]
    assert all(b.meta is None for b in batches[1:])
    assert pub.metrics.batches_published == 3 and pub.metrics.events_published == 4


async def test_digest_rides_every_n_batches_and_matches_the_cache() -> None:
    """With digest_every_batches=3 the digest is on seq 0 (opening), 3, 6 and equals the cache's."""
    cache = FakeCache()
    log = MemoryLog()
    expected: dict[int, str] = {}
    async with Publisher(
        cache, log, source="w0", config=PublisherConfig(digest_every_batches=3)
    ) as pub:
        expected[0] = cache.state_digest()
        for h in range(1, 8):
            cache.store(h)
            pub.step()
            pub.step()  # empty steps must not shift the cadence
            expected[h] = cache.state_digest()
    batches = [decode_batch(r.payload) for r in [r async for r in log.read()]]
    with_digest = {b.seq: b.digest for b in batches if b.digest is not None}
    assert with_digest == {0: expected[0], 3: expected[3], 6: expected[6]}


async def test_random_workload_replays_to_the_primary_state() -> None:
    """After many random steps a strict replay of the log equals the primary, digests included."""
    rng = random.Random(7)
    cache = FakeCache()
    log = MemoryLog()
    next_hash = [1]
    async with Publisher(
        cache, log, source="w0", config=PublisherConfig(digest_every_batches=5)
    ) as pub:
        for _ in range(300):
            for _ in range(rng.randrange(4)):
                random_mutation(cache, rng, next_hash)
            pub.step()
            if rng.random() < 0.1:
                await pub.flush()
    state = (await replay(log))["w0"]
    assert state.digest.hexdigest() == cache.state_digest()
    assert cache.model.residency() == state.blocks
    assert state.digests_checked > 10


async def test_flush_waits_for_durability_and_appends_are_batched() -> None:
    """Queued batches are durable only after flush; one append call carries several of them."""
    cache = FakeCache()
    slow = SlowLog(MemoryLog(), held=True)
    async with Publisher(
        cache, slow, source="w0", config=PublisherConfig(max_append_batch=8)
    ) as pub:
        await slow.wait_blocked()  # the opening batch is in flight, held
        for h in range(1, 11):
            cache.store(h)
            pub.step()
        assert pub.metrics.queue_depth == 10
        async with anyio.create_task_group() as tg:
            tg.start_soon(pub.flush)
            assert pub.metrics.batches_published == 0
            slow.release()
        assert pub.metrics.batches_published == 11
        assert pub.metrics.queue_depth == 0
        assert pub.metrics.appends == 3  # 1 (opening) + 8 + 2
    assert (await replay(slow))["w0"].digest.hexdigest() == cache.state_digest()


async def test_leaving_the_context_flushes() -> None:
    """Batches queued right before leaving `async with` are in the log afterwards."""
    cache = FakeCache()
    log = MemoryLog()
    async with Publisher(cache, log, source="w0") as pub:
        for h in range(1, 6):
            cache.store(h)
            pub.step()
    assert len([r async for r in log.read()]) == 6
    with pytest.raises(PublisherClosedError):
        pub.step()


async def test_overflow_resync_discards_counts_and_opens_a_new_epoch() -> None:
    """A full queue under `resync` drops queued batches, counts them, republishes the tree."""
    cache = FakeCache()
    slow = SlowLog(MemoryLog(), held=True)
    async with Publisher(
        cache, slow, source="w0", config=PublisherConfig(max_queue_batches=4)
    ) as pub:
        first_epoch = pub.epoch
        await slow.wait_blocked()
        for h in range(1, 5):
            cache.store(h)
            pub.step()
        cache.store(5)
        cache.tombstone(5)
        assert pub.step() == 1  # the new epoch's opening
        m = pub.metrics
        assert (m.overflows, m.resyncs, m.discarded_batches, m.discarded_events) == (1, 1, 4, 4)
        assert pub.epoch != first_epoch and m.epochs_started == 2
        assert m.queue_depth == 1
        slow.release()
        await pub.flush()
    state = (await replay(slow))["w0"]
    assert state.epochs == [first_epoch, pub.epoch]
    assert state.digest.hexdigest() == cache.state_digest()
    assert state.blocks == {h: (None, h != 5) for h in range(1, 6)}


async def test_repeated_overflow_keeps_the_replica_exact() -> None:
    """A log that stays slow overflows again and again; the replay still ends equal."""
    rng = random.Random(3)
    cache = FakeCache()
    slow = SlowLog(MemoryLog())
    next_hash = [1]
    async with Publisher(
        cache, slow, source="w0", config=PublisherConfig(max_queue_batches=3, max_append_batch=2)
    ) as pub:
        for i in range(200):
            if i % 50 == 0:
                slow.hold()
            if i % 50 == 25:
                slow.release()
            random_mutation(cache, rng, next_hash)
            pub.step()
            await anyio.lowlevel.checkpoint()
        slow.release()
    assert pub.metrics.resyncs >= 2
    state = (await replay(slow))["w0"]
    assert 1 < len(state.epochs) <= pub.metrics.epochs_started  # some openings were discarded
    assert state.digest.hexdigest() == cache.state_digest()


async def test_overflow_block_raises_backpressure_and_loses_nothing() -> None:
    """Under `block` a full queue raises Backpressure and keeps the events; wait_ready recovers."""
    cache = FakeCache()
    slow = SlowLog(MemoryLog(), held=True)
    async with Publisher(
        cache, slow, source="w0", config=PublisherConfig(max_queue_batches=2, overflow="block")
    ) as pub:
        await slow.wait_blocked()
        for h in range(1, 3):
            cache.store(h)
            pub.step()
        cache.store(3)
        with pytest.raises(Backpressure) as info:
            pub.step()
        assert info.value.queue_depth == 2 and info.value.max_queue_batches == 2
        assert not pub.ready
        cache.store(4)
        with pytest.raises(Backpressure):
            pub.step()
        m = pub.metrics
        assert (m.overflows, m.backpressure, m.resyncs, m.discarded_batches) == (2, 2, 0, 0)
        slow.release()
        await pub.wait_ready()
        assert pub.step() == 1
    state = (await replay(slow))["w0"]
    assert len(state.epochs) == 1 and state.next_seq == 4
    assert len(state.batches[-1].events) == 2, "the held-back events come in the next batch"
    assert state.digest.hexdigest() == cache.state_digest()


@pytest.mark.parametrize("overflow", ["resync", "block"])
async def test_an_empty_step_never_overflows(overflow: str) -> None:
    """A step without events publishes nothing, even with the queue full."""
    cache = FakeCache()
    slow = SlowLog(MemoryLog(), held=True)
    async with Publisher(
        cache, slow, "w0", config=PublisherConfig(max_queue_batches=1, overflow=overflow)
    ) as pub:
        await slow.wait_blocked()
        cache.store(1)
        pub.step()
        assert not pub.ready
        assert pub.step() == 0
        assert pub.metrics.overflows == 0
        slow.release()


async def test_leaving_publishes_changes_made_after_the_last_step() -> None:
    """A clean exit takes a final step, so the log ends equal to the cache."""
    cache = FakeCache()
    log = MemoryLog()
    async with Publisher(cache, log, "w0"):
        cache.store(1)
    assert (await replay(log))["w0"].blocks == {1: (None, True)}


async def test_append_failure_fails_every_waiter_with_the_cause() -> None:
    """A non-retriable log error kills the append task; step, flush, wait_ready and exit raise."""
    cache = FakeCache()
    cause = LogWriteError("disk full", retriable=False)
    failing = FailingLog(MemoryLog(), [None, cause])
    with pytest.raises(PublisherFailedError) as at_exit:
        async with Publisher(cache, failing, source="w0") as pub:
            await pub.flush()
            cache.store(1)
            pub.step()
            with pytest.raises(PublisherFailedError) as info:
                await pub.flush()
            assert info.value.cause is cause and info.value.__cause__ is cause
            with pytest.raises(PublisherFailedError):
                pub.step()
            with pytest.raises(PublisherFailedError):
                await pub.wait_ready()
            assert pub.metrics.failed and pub.metrics.append_errors == 1
    assert at_exit.value.cause is cause
    assert len([r async for r in failing.read()]) == 1, "what was durable stays"


async def test_retriable_errors_are_retried_and_counted() -> None:
    """Retriable log errors are retried with backoff; the log ends complete and in order."""
    cache = FakeCache()
    flaky = FailingLog(MemoryLog(), [None, LogUnavailableError("broker away"), None])
    async with Publisher(
        cache, flaky, source="w0", config=PublisherConfig(retry_backoff_s=0)
    ) as pub:
        await pub.flush()
        cache.store(1)
        pub.step()
        await pub.flush()
        assert pub.metrics.append_errors == 1 and pub.metrics.append_retries == 1
    state = (await replay(flaky))["w0"]
    assert state.next_seq == 2 and state.digest.hexdigest() == cache.state_digest()


async def test_retries_give_up_after_the_limit() -> None:
    """A retriable error that persists past append_retries fails the publisher."""
    errors = [None] + [LogUnavailableError("down")] * 3
    flaky = FailingLog(MemoryLog(), errors)
    cache = FakeCache()
    with pytest.raises(PublisherFailedError):
        async with Publisher(
            cache, flaky, "w0", config=PublisherConfig(append_retries=2, retry_backoff_s=0)
        ) as pub:
            await pub.flush()
            cache.store(1)
            pub.step()
            await pub.flush()
    assert pub.metrics.append_retries == 2 and pub.metrics.append_errors == 3


async def test_leaving_on_an_exception_does_not_wait_for_a_stuck_log() -> None:
    """An exception in the body propagates at once even when the log is held forever."""
    cache = FakeCache()
    slow = SlowLog(MemoryLog(), held=True)
    with pytest.raises(KeyError):
        async with Publisher(cache, slow, source="w0") as pub:
            await slow.wait_blocked()
            raise KeyError("serving loop crashed")
    assert pub.metrics.batches_published == 0


async def test_huge_steps_are_split_with_the_digest_on_the_last_part() -> None:
    """max_events_per_batch splits the opening and big steps; meta first, digest last."""
    cache = FakeCache()
    _chain(cache, 1, 5)
    log = MemoryLog()
    async with Publisher(
        cache,
        log,
        source="w0",
        config=PublisherConfig(max_events_per_batch=2, digest_every_batches=1),
    ) as pub:
        _chain(cache, 100, 3)
        pub.step()
    batches = [decode_batch(r.payload) for r in [r async for r in log.read()]]
    assert [len(b.events) for b in batches] == [2, 2, 2, 2, 1]
    assert [b.meta is not None for b in batches] == [True] + [False] * 4
    assert [b.digest is not None for b in batches] == [False, False, True, False, True]
    state = (await replay(log))["w0"]
    assert state.digest.hexdigest() == cache.state_digest() and len(state.blocks) == 8


async def test_sources_are_keys_and_stay_separate() -> None:
    """Two publishers on one log write under their own keys; each replays to its own cache."""
    log = MemoryLog(partitions=3)
    caches = {"a": FakeCache(), "b": FakeCache()}
    async with Publisher(caches["a"], log, "a") as pa, Publisher(caches["b"], log, "b") as pb:
        for h in range(1, 20):
            caches["a" if h % 2 else "b"].store(h)
            pa.step()
            pb.step()
    states = await replay(log)
    assert {s: st.digest.hexdigest() for s, st in states.items()} == {
        s: c.state_digest() for s, c in caches.items()
    }


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("max_queue_batches", 0),
        ("overflow", "drop"),
        ("digest_every_batches", 0),
        ("max_append_batch", -1),
        ("max_append_bytes", True),
        ("max_events_per_batch", 1.5),
        ("max_batch_bytes", 100),
        ("append_retries", -1),
        ("retry_backoff_s", -1.0),
        ("close_timeout_s", "soon"),
    ],
)
def test_a_bad_config_value_names_its_field(field: str, bad: object) -> None:
    """Each bad PublisherConfig value is a ValueError naming the field."""
    with pytest.raises(ValueError, match=field):
        PublisherConfig(**{field: bad})  # type: ignore[arg-type]  # deliberately bad


def test_a_bad_source_is_refused() -> None:
    """An empty source is a ValueError naming the argument."""
    with pytest.raises(ValueError, match="source"):
        Publisher(FakeCache(), MemoryLog(), "")


def test_config_is_frozen_and_names_policies_as_enums() -> None:
    """A PublisherConfig cannot change after it was built; a policy given by name is the enum."""
    config = PublisherConfig(overflow="block")
    assert config.overflow is OverflowPolicy.BLOCK
    with pytest.raises(AttributeError):
        config.max_queue_batches = 1  # type: ignore[misc]  # the point: frozen


async def test_metrics_are_one_live_object() -> None:
    """pub.metrics is the same object throughout, updated as batches become durable."""
    cache, log = FakeCache(), MemoryLog()
    async with Publisher(cache, log, "w0") as pub:
        metrics = pub.metrics
        cache.store(1)
        pub.step()
        await pub.flush()
        assert pub.metrics is metrics
        assert (metrics.batches_published, metrics.epoch, metrics.source) == (2, pub.epoch, "w0")
        assert metrics.as_dict()["events_published"] == 2


async def test_step_before_start_is_refused() -> None:
    """step() and flush() outside `async with` raise PublisherClosedError."""
    pub = Publisher(FakeCache(), MemoryLog(), "w0")
    with pytest.raises(PublisherClosedError):
        pub.step()
    with pytest.raises(PublisherClosedError):
        await pub.flush()


async def test_a_stuck_log_at_exit_times_out_loudly() -> None:
    """A clean exit on a log that never acknowledges raises TimeoutError (close_timeout_s)."""
    slow = SlowLog(MemoryLog(), held=True)
    with pytest.raises(TimeoutError):
        async with Publisher(FakeCache(), slow, "w0", config=PublisherConfig(close_timeout_s=0.01)):
            await slow.wait_blocked()


def test_a_cache_with_events_disabled_is_refused() -> None:
    """A cache that records no events would publish nothing: refused with a clear error."""
    cache = FakeCache()
    cache.events_enabled = False  # type: ignore[attr-defined]  # the real tree's switch
    with pytest.raises(ValueError, match="events are disabled"):
        Publisher(cache, MemoryLog(), "w0")
