"""Differential tests of the native event recorder against its pure-Python twin.

One tree, its changes teed into the native ``EventRecorder`` and the ``ReferenceSink``: after
random serving sequences (pages 1, 2, 4 and 16, namespaces, evictions, tombstones, restores,
resets) both give the same events, digest, snapshot and per-node block hashes.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Callable, Sequence

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, run_state_machine_as_test

from cache import SWAKVAllocator, SWARadixCache
from cache.events import BlockStored, format_digest
from cache.events.recorder import EventRecorder, EventRecorderError
from cache.tree.sink import RecorderSink
from swa_es.engine.worker import CacheWorker
from swa_es.engine.workload import ChatWorkload
from tests.cache.test_model_based import CacheMachine, walk
from tests.oracles.sink import ReferenceSink, attach_reference

PAGE_SIZES = [1, 2, 4, 16]


def assert_twins_agree(cache: SWARadixCache, twin: ReferenceSink) -> None:
    """Events since the last call, digest, snapshot and every node's hashes are equal."""
    assert cache.take_events() == twin.take()
    assert cache.state_digest() == format_digest(twin.digest_value())
    assert cache.snapshot_events() == twin.snapshot()
    recorder = cache.event_recorder
    assert recorder is not None
    for root in cache._state.roots.values():
        for node in walk(root):
            assert recorder.block_hashes(node.node_id) == twin.block_hashes(node)


class TwinMachine(CacheMachine):
    """The model-based serving machine, with a reference twin checked after every step."""

    @initialize(page_size=st.sampled_from(PAGE_SIZES), window=st.integers(min_value=1, max_value=9))
    def setup(self, page_size: int, window: int) -> None:  # type: ignore[override]  # no events flag
        """A small tree with events on and a reference twin attached before anything happens."""
        self.page_size = page_size
        self.window = window
        self.alloc = SWAKVAllocator(32 * page_size, 10 * page_size, page_size, self.device)
        self.cache = SWARadixCache(self.alloc, window, page_size, enable_events=True)
        self.twin = attach_reference(self.cache)
        self.events = True
        self._drain()

    def _drain(self) -> None:
        native = self.cache.take_events()
        assert native == self.twin.take()
        self.reference.apply_all(native)
        assert self.cache.state_digest() == format_digest(self.twin.digest_value())
        assert self.cache.snapshot_events() == self.twin.snapshot()


@pytest.mark.slow
def test_native_events_equal_the_reference_on_random_serving() -> None:
    """Random serving sequences: native events, digest and snapshot equal the twin's."""
    run_state_machine_as_test(
        TwinMachine,
        settings=settings(
            max_examples=120,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


@pytest.mark.parametrize("page_size", PAGE_SIZES)
def test_chat_workload_with_evictions_and_resets_agrees(page_size: int) -> None:
    """A chat workload on small pools (evictions, tombstones, restores) and resets agrees."""
    rng = random.Random(page_size)
    alloc = SWAKVAllocator(2048, 512, page_size=page_size, device="cpu")
    cache = SWARadixCache(alloc, sliding_window_size=24, page_size=page_size)
    twin = attach_reference(cache)
    worker = CacheWorker(cache)
    workload = ChatWorkload(seed=page_size, system_prompt_tokens=128, max_conversation_tokens=640)
    for step, request in enumerate(workload.take(120)):
        worker.serve(request)
        if rng.random() < 0.02:
            cache.reset()
        if rng.random() < 0.3 or step % 17 == 0:
            assert_twins_agree(cache, twin)
    assert_twins_agree(cache, twin)
    cache.sanity_check(caller_held_full=0, caller_held_swa=0)


def test_events_are_hashed_only_when_read() -> None:
    """Recording hashes nothing: a store of pages with an unknown parent fails only at the read,
    and the failure then sticks (a recorder that lost track never answers again)."""
    recorder = EventRecorder(1)
    recorder.stored(5, 4, (1, 2, 3))
    assert recorder.pending_events == 3
    with pytest.raises(EventRecorderError, match="node 4 is not in the table"):
        recorder.take_events()
    with pytest.raises(EventRecorderError):
        recorder.digest()


class _NodeWithoutValue:
    """A stand-in tree node whose KV value (a device tensor in the tree) must not be read."""

    def __init__(self, node_id: int, parent: _NodeWithoutValue | None, tokens: tuple[int, ...]):
        self.node_id = node_id
        self._parent = parent
        self._token_ids = tokens

    @property
    def _value(self) -> object:
        raise AssertionError("the sink read a node's KV value (a device tensor)")


def test_the_recorder_sink_never_reads_a_nodes_tensor() -> None:
    """Recording reads node ids and token ids only, never the node's value, so it adds no
    device-to-host copy or sync to the serving loop."""
    sink = RecorderSink(2)
    root = _NodeWithoutValue(1, None, ())
    node = _NodeWithoutValue(2, root, (7, 8, 9, 10))
    sink.root(root, None)  # type: ignore[arg-type]  # a stand-in node
    sink.stored(node, array("I", (5, 7, 8, 9, 10)), 1)  # type: ignore[arg-type]  # a stand-in
    for record in (sink.swa_evicted, sink.swa_restored, sink.removed):
        record(node)  # type: ignore[arg-type]  # a stand-in node
    assert sink.recorder.pending_events == 2 + 3
    stored = sink.recorder.take_events()[:2]
    assert [e.token_ids for e in stored] == [(7, 8), (9, 10)]  # type: ignore[union-attr]


@pytest.mark.parametrize("form", [tuple, list, lambda ids: array("I", ids)])
def test_a_store_records_its_token_range_from_any_sequence(
    form: Callable[[list[int]], Sequence[int]],
) -> None:
    """``stored(..., start, length)`` records ``token_ids[start:start + length]``, the same from
    an ``array("I")`` (copied as one block) as from a tuple or list; a range past the end is
    refused, nothing recorded."""
    ids = form([9, 9, 1, 2, 3, 4, 9])
    recorder = EventRecorder(2)
    recorder.cleared()
    recorder.root(1, None)
    recorder.stored(2, 1, ids, 2, 4)
    _, *stored = recorder.take_events()
    assert [e.token_ids for e in stored] == [(1, 2), (3, 4)]  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="outside"):
        recorder.stored(3, 2, ids, 4, 4)
    recorder.stored(3, 2, ids, 5)  # to the end: (4, 9)
    assert [e.token_ids for e in recorder.take_events()] == [(4, 9)]  # type: ignore[union-attr]


def test_recorder_materialises_one_blockstored_per_page() -> None:
    """A node of three pages comes out as three chained BlockStored events."""
    recorder = EventRecorder(2)
    recorder.cleared()
    recorder.root(1, None)
    recorder.stored(2, 1, [1, 2, 3, 4, 5, 6])
    _, *stored = recorder.take_events()
    assert [type(e) for e in stored] == [BlockStored] * 3
    assert [e.token_ids for e in stored] == [(1, 2), (3, 4), (5, 6)]  # type: ignore[union-attr]
    parents = [e.parent_block_hash for e in stored]  # type: ignore[union-attr]
    hashes = [e.block_hashes[0] for e in stored]  # type: ignore[union-attr]
    assert parents == [None, *hashes[:-1]]


@pytest.mark.parametrize("tokens", [(1, -1), (1, 2**32), ("a", 1), (1, 2, 3), (), [1.5, 2]])
def test_bad_stores_are_refused_at_the_boundary(tokens: object) -> None:
    """Tokens out of range, not ints, or not whole pages: ValueError, nothing recorded."""
    recorder = EventRecorder(2)
    with pytest.raises(ValueError):
        recorder.stored(2, 1, tokens)  # type: ignore[arg-type]  # deliberately bad
    assert recorder.pending_events == 0


def test_bad_limits_are_refused() -> None:
    """An encoder needs positive batch limits and digest cadence; a recorder a page size."""
    for limits in [(0, 100, 1), (10, 0, 1), (10, 100, 0)]:
        with pytest.raises(ValueError, match="positive"):
            EventRecorder(1).encoder("w0", *limits)
    with pytest.raises(ValueError, match="page_size"):
        EventRecorder(0)
