"""The publisher on a real tree (the native recorder path) against the pure-Python reference.

The tree's changes are teed into a ``ReferenceSink``; the reference path takes its events per
step, numbers them with a ``BatchBuilder`` and encodes them with the reference codec. The records
the publisher wrote (cut on the serving loop, hashed and encoded in its worker thread) must be
byte for byte what the reference path writes for the same epoch and timestamp.
"""

from __future__ import annotations

import contextlib
import random
import time
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cache import SWAKVAllocator, SWARadixCache
from cache.events import BATCH_VERSION, EventBatch, decode_batch, format_digest
from cache.events.recorder import EventRecorder, EventRecorderError, RecordEncoder
from log import MemoryLog
from swa_es import Backpressure, Publisher, PublisherFailedError
from swa_es.engine.worker import CacheWorker
from swa_es.engine.workload import ChatWorkload
from swa_es.publish.batching import BatchBuilder, cache_meta
from swa_es.publish.config import PublisherConfig
from swa_es.publish.feeds import HURRY_AFTER_PAUSE_S, RecorderFeed
from swa_es.testing import SlowLog
from tests.oracles.codec import encode_batch as reference_encode
from tests.oracles.sink import ReferenceSink, attach_reference
from tests.swa_es.doubles import replay
from tests.swa_es.publisher_ops import check_replays_to, run_ops

PAGE_SIZES = [1, 2, 4, 16]


def small_tree(page_size: int) -> SWARadixCache:
    """A tree on pools small enough for evictions and tombstones in a short workload."""
    alloc = SWAKVAllocator(2048, 512, page_size=page_size, device="cpu")
    return SWARadixCache(alloc, sliding_window_size=24, page_size=page_size)


def workload(seed: int, count: int) -> list[object]:
    """Chat requests short enough for the small pools."""
    chat = ChatWorkload(seed=seed, system_prompt_tokens=128, max_conversation_tokens=640)
    return list(chat.take(count))


class ReferencePath:
    """What the publisher must write, built from the twin's events the old way."""

    def __init__(self, cache: SWARadixCache, twin: ReferenceSink, **limits: int) -> None:
        self.twin = twin
        self.builder = BatchBuilder(
            "w0", cache_meta(cache, digest_every_batches=limits["digest_every_batches"]), **limits
        )
        self.batches: list[EventBatch] = []

    def _digest(self) -> str:
        return format_digest(self.twin.digest_value())

    def open_epoch(self) -> None:
        """The opening: pending events dropped, the twin's snapshot and digest."""
        self.twin.take()
        self.batches += self.builder.open_epoch(self.twin.snapshot(), self._digest())

    def step(self) -> None:
        """One step of the twin's events (nothing for an empty step)."""
        events = self.twin.take()
        if events:
            self.batches += self.builder.step_batches(events, self._digest)


def assert_same_records(payloads: list[bytes], reference: list[EventBatch]) -> None:
    """Each record equals the reference batch's bytes under the record's own epoch and ts."""
    assert len(payloads) == len(reference)
    for payload, expected in zip(payloads, reference, strict=True):
        written = decode_batch(payload)
        renamed = EventBatch(
            source=expected.source,
            epoch=written.epoch,
            seq=expected.seq,
            ts=written.ts,
            events=expected.events,
            digest=expected.digest,
            meta=expected.meta,
            v=BATCH_VERSION,
        )
        assert written == renamed
        assert payload == reference_encode(renamed)


@pytest.mark.parametrize("page_size", PAGE_SIZES)
async def test_records_equal_the_reference_path_byte_for_byte(page_size: int) -> None:
    """Random steps (evictions, tombstones, resets, empty steps, split steps) write the same
    records the reference path does, digests and timestamps included."""
    rng = random.Random(page_size)
    cache = small_tree(page_size)
    twin = attach_reference(cache)
    worker = CacheWorker(cache)
    limits = {"digest_every_batches": 3, "max_events_per_batch": 97}
    reference = ReferencePath(cache, twin, **limits)
    log = MemoryLog()
    requests = workload(page_size, 80)
    worker.serve(requests[0])  # changes before the start are covered by the opening
    async with Publisher(cache, log, "w0", config=PublisherConfig(**limits)) as pub:
        reference.open_epoch()
        for request in requests[1:]:
            worker.serve(request)  # type: ignore[arg-type]  # a ChatRequest
            if rng.random() < 0.03:
                cache.reset()
            if rng.random() < 0.8:
                pub.step()
                reference.step()
            if rng.random() < 0.3:
                await anyio.lowlevel.checkpoint()
        reference.step()  # the publisher's last step, taken on leaving
    payloads = [record.payload async for record in log.read()]
    assert_same_records(payloads, reference.batches)
    state = (await replay(log))["w0"]
    assert state.digest.hexdigest() == cache.state_digest()
    assert state.digests_checked > 10


async def test_big_steps_equal_the_reference_path() -> None:
    """Steps of the bench's chat workload at page 1 (tens of KB of records each) under the
    default limits write the reference path's records, interleaved with small steps."""
    alloc = SWAKVAllocator(32768, 8192, page_size=1, device="cpu")
    cache = SWARadixCache(alloc, sliding_window_size=256, page_size=1)
    twin = attach_reference(cache)
    worker = CacheWorker(cache)
    config = PublisherConfig()
    limits = {
        "digest_every_batches": config.digest_every_batches,
        "max_events_per_batch": config.max_events_per_batch,
    }
    reference = ReferencePath(cache, twin, **limits)
    log = MemoryLog()
    requests = ChatWorkload(seed=3).take(60)
    async with Publisher(cache, log, "w0", config=config) as pub:
        reference.open_epoch()
        for index, request in enumerate(requests):
            worker.serve(request)
            if index % 4 == 0:
                cache.evict(swa_tokens=64)  # a small step of tombstones alone
                pub.step()
                reference.step()
            pub.step()
            reference.step()
            await anyio.lowlevel.checkpoint()
        reference.step()
    payloads = [record.payload async for record in log.read()]
    assert max(map(len, payloads)) > 16 * 1024
    assert_same_records(payloads, reference.batches)


def _threads() -> set[str]:
    """Ids of this process's encoder threads (Linux; by name, so that a thread torch starts
    meanwhile is not counted)."""
    found = set()
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
            if (task / "comm").read_text().strip() == "swa-es-encoder":
                found.add(task.name)
    return found


def _threads_started(before: set[str]) -> set[str]:
    """Encoder threads not in ``before``, once a new one has named itself (a Rust thread sets
    its name from inside, a moment after its spawn returns): waits up to 10 s for the first."""
    deadline = time.monotonic() + 10
    while not (started := _threads() - before) and time.monotonic() < deadline:
        time.sleep(0.001)
    return started


def _threads_left(before: set[str]) -> set[str]:
    """Encoder threads not in ``before``, once the ones just joined have left ``/proc`` (the
    kernel lists an exiting thread a moment after its join returns): waits up to 10 s."""
    deadline = time.monotonic() + 10
    while (left := _threads() - before) and time.monotonic() < deadline:
        time.sleep(0.001)
    return left


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
async def test_the_native_path_never_takes_python_events_and_encodes_off_the_loop() -> None:
    """The publisher cuts the recorder (take_events() is never called) and its records are
    written by the recorder's own encoder thread, which stops with the publisher."""
    cache = small_tree(1)
    before = _threads()

    def refuse() -> None:
        raise AssertionError("the native path took Python events")

    cache.take_events = refuse  # type: ignore[assignment, method-assign]  # a tripwire
    worker = CacheWorker(cache)
    async with Publisher(cache, MemoryLog(), "w0") as pub:
        assert len(_threads_started(before)) == 1, "one encoder thread beside the loop"
        for request in workload(0, 20):
            worker.serve(request)  # type: ignore[arg-type]  # a ChatRequest
            pub.step()
            await anyio.lowlevel.checkpoint()
    assert not _threads_left(before), "the encoder thread stopped with the publisher"
    assert pub.metrics.batches_published == 21


async def test_a_recorder_that_loses_track_fails_the_publisher_loudly() -> None:
    """An op the recorder's table cannot follow fails the encoder's job: flush, step and the
    exit raise PublisherFailedError naming the recorder's error; what was durable stays."""
    cache = small_tree(1)
    log = MemoryLog()
    with pytest.raises(PublisherFailedError) as at_exit:
        async with Publisher(cache, log, "w0") as pub:
            await pub.flush()
            recorder = cache.event_recorder
            assert recorder is not None
            recorder.removed(10**9, 1)  # a node the tree never had
            pub.step()
            with pytest.raises(PublisherFailedError) as info:
                await pub.flush()
            assert isinstance(info.value.cause, EventRecorderError)
            with pytest.raises(PublisherFailedError):
                pub.step()
    assert isinstance(at_exit.value.cause, EventRecorderError)
    assert pub.metrics.failed
    assert len([r async for r in log.read()]) == 1, "the opening stays"


async def test_overflow_resync_on_a_real_tree_replays_exactly() -> None:
    """Queued cut steps discarded by a resync still reach the recorder's table: the new epoch's
    opening holds the tree as it is, and the replay ends equal to it."""
    cache = small_tree(1)
    worker = CacheWorker(cache)
    slow = SlowLog(MemoryLog(), held=True)
    requests = workload(5, 30)
    async with Publisher(cache, slow, "w0", config=PublisherConfig(max_queue_batches=4)) as pub:
        first = pub.epoch
        await slow.wait_blocked()
        for request in requests[:4]:
            worker.serve(request)  # type: ignore[arg-type]  # a ChatRequest
            pub.step()
        worker.serve(requests[4])  # type: ignore[arg-type]  # a ChatRequest
        assert pub.step() == 1  # the new epoch's opening
        m = pub.metrics
        assert (m.resyncs, m.discarded_batches, m.epochs_started) == (1, 4, 2)
        assert pub.epoch != first
        for request in requests[5:]:
            worker.serve(request)  # type: ignore[arg-type]  # a ChatRequest
            pub.step()
            await anyio.lowlevel.checkpoint()
        slow.release()
    state = (await replay(slow))["w0"]
    assert state.epochs == [first, pub.epoch]
    assert state.digest.hexdigest() == cache.state_digest()


async def test_backpressure_on_a_real_tree_keeps_every_change() -> None:
    """Under `block` the cut waits in the recorder; the next step publishes it."""
    cache = small_tree(2)
    worker = CacheWorker(cache)
    slow = SlowLog(MemoryLog(), held=True)
    requests = workload(9, 6)
    config = PublisherConfig(max_queue_batches=2, overflow="block")
    async with Publisher(cache, slow, "w0", config=config) as pub:
        await slow.wait_blocked()
        for request in requests[:2]:
            worker.serve(request)  # type: ignore[arg-type]  # a ChatRequest
            pub.step()
        worker.serve(requests[2])  # type: ignore[arg-type]  # a ChatRequest
        with pytest.raises(Backpressure):
            pub.step()
        worker.serve(requests[3])  # type: ignore[arg-type]  # a ChatRequest
        slow.release()
        await pub.wait_ready()
        assert pub.step() == 1
    state = (await replay(slow))["w0"]
    assert len(state.epochs) == 1 and state.next_seq == 4
    assert state.digest.hexdigest() == cache.state_digest()


OPS = st.lists(
    st.sampled_from(["serve", "serve", "step", "step", "yield", "hold", "release", "reset"]),
    max_size=60,
)


async def _interleaving(ops: list[str], overflow: str, page_size: int, seed: int) -> None:
    cache = small_tree(page_size)
    worker = CacheWorker(cache)
    requests = iter(workload(seed, len(ops)))
    slow = SlowLog(MemoryLog())
    config = PublisherConfig(max_queue_batches=3, max_append_batch=2, overflow=overflow)
    cache_ops = {
        "serve": lambda: worker.serve(next(requests)),  # type: ignore[arg-type]  # a ChatRequest
        "reset": cache.reset,
    }
    async with Publisher(cache, slow, "w0", config=config) as pub:
        await run_ops(pub, slow, ops, overflow, cache_ops)
    await check_replays_to(slow, pub, cache.state_digest())


@settings(max_examples=30, deadline=None)
@given(
    ops=OPS,
    overflow=st.sampled_from(["resync", "block"]),
    page_size=st.sampled_from(PAGE_SIZES),
    seed=st.integers(0, 1000),
)
def test_any_interleaving_on_a_real_tree_replays_to_it(
    ops: list[str], overflow: str, page_size: int, seed: int
) -> None:
    """Random serving, steps, holds, resets and yields under both policies replay exactly."""
    anyio.run(_interleaving, ops, overflow, page_size, seed)


async def test_a_tree_refuses_the_upstream_only_calls() -> None:
    """A tree is its own source: an unknown start and a gap are refused with a ValueError."""
    cache = small_tree(1)
    with pytest.raises(ValueError, match="first epoch is always known"):
        Publisher(cache, MemoryLog(), "w0", trusted_start=False)
    async with Publisher(cache, MemoryLog(), "w0") as pub:
        with pytest.raises(ValueError, match="no gap"):
            pub.publish_gap()


class _CountingEncoder:
    """The native encoder, with its ``hurry`` calls counted."""

    def __init__(self, inner: RecordEncoder) -> None:
        self.inner = inner
        self.hurried = 0

    def hurry(self) -> None:
        self.hurried += 1
        self.inner.hurry()

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


class _CountingRecorder:
    """A tree's recorder whose encoders count their ``hurry`` calls."""

    def __init__(self, inner: EventRecorder) -> None:
        self.inner = inner
        self.encoders: list[_CountingEncoder] = []

    def encoder(self, *args: object, **options: bool) -> _CountingEncoder:
        encoder = _CountingEncoder(self.inner.encoder(*args, **options))  # type: ignore[arg-type]
        self.encoders.append(encoder)
        return encoder

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


async def test_a_step_after_a_pause_is_written_at_once_a_burst_shares_rounds() -> None:
    """The encoder lingers for more steps after a round's first; a step that follows a pause
    has it write at once (no other step is near), steps in a burst do not. Every step's records
    are written either way."""
    cache = small_tree(16)
    assert cache.event_recorder is not None
    recorder = _CountingRecorder(cache.event_recorder)
    builder = BatchBuilder("w0", cache_meta(cache, digest_every_batches=8), digest_every_batches=8)
    clock = [100.0]
    feed = RecorderFeed(recorder, builder, clock=lambda: clock[0])  # type: ignore[arg-type]
    feed.start()
    try:
        feed.reopen()
        (encoder,) = recorder.encoders
        worker = CacheWorker(cache)
        requests = workload(3, 6)
        pause = HURRY_AFTER_PAUSE_S
        # first step; a burst of two; after a pause; right after it; after a pause again
        at = [0.0, pause / 10, pause / 5, 2 * pause, 2.1 * pause, 4 * pause]
        hurried: list[int] = []
        batches = []
        for request, offset in zip(requests, at, strict=True):
            clock[0] = 100.0 + offset
            worker.serve(request)  # type: ignore[arg-type]  # a ChatRequest
            before = encoder.hurried
            batches += feed.step()
            hurried.append(encoder.hurried - before)
        assert hurried == [1, 0, 0, 1, 0, 1]
        with anyio.fail_after(30):  # a hang guard, not a timing
            while feed.writing():
                await feed.wait_written()
                feed.collect()
        assert batches and all(batch.payload is not None for batch in batches)
    finally:
        feed.close()
