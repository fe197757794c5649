"""BatchBuilder: epoch/seq numbering, meta, digest cadence and splitting, without a log."""

from __future__ import annotations

import itertools

import pytest

from cache.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    BlockSWAEvicted,
    Event,
    EventBatch,
    encode_batch,
)
from swa_es.publish.batching import BatchBuilder, encoded_size_bound


def _stored(h: int) -> Event:
    return BlockStored((h,), None, (h,), 1)


def _builder(**kwargs: int) -> BatchBuilder:
    ids = (f"e{i}" for i in itertools.count())
    return BatchBuilder(
        "w0",
        {"page_size": 1, "sliding_window_size": 4},
        clock=lambda: 12.5,
        epoch_ids=lambda: next(ids),
        **kwargs,
    )


def test_open_epoch_starts_with_cleared_and_carries_meta_and_digest() -> None:
    """An opening is seq 0 of a fresh epoch: AllBlocksCleared first, then the snapshot."""
    builder = _builder()
    [batch] = builder.open_epoch([_stored(1), BlockSWAEvicted((1,))], "d0")
    assert (batch.source, batch.epoch, batch.seq, batch.ts) == ("w0", "e0", 0, 12.5)
    assert batch.events == (AllBlocksCleared(), _stored(1), BlockSWAEvicted((1,)))
    assert batch.meta == {"page_size": 1, "sliding_window_size": 4} and batch.digest == "d0"


def test_each_epoch_gets_a_fresh_id_and_restarts_seq() -> None:
    """A second opening renumbers from 0 under a new epoch id."""
    builder = _builder()
    builder.open_epoch([], "d")
    builder.step_batches([_stored(1)], lambda: "x")
    [again] = builder.open_epoch([], "d")
    assert (again.epoch, again.seq) == ("e1", 0)
    [nxt] = builder.step_batches([_stored(2)], lambda: "x")
    assert (nxt.epoch, nxt.seq, nxt.meta) == ("e1", 1, None)


def test_digest_cadence_counts_batches_not_steps() -> None:
    """Empty steps make no batch and do not advance the cadence; digest only when due."""
    builder = _builder(digest_every_batches=2)
    builder.open_epoch([], "d")
    calls: list[int] = []

    def digest() -> str:
        calls.append(1)
        return f"d{len(calls)}"

    digests = []
    for h in range(1, 6):
        assert builder.step_batches([], digest) == []
        [batch] = builder.step_batches([_stored(h)], digest)
        digests.append(batch.digest)
    assert digests == [None, "d1", None, "d2", None]
    assert len(calls) == 2, "the digest is computed only when it is written"


def test_a_big_step_is_split_and_the_digest_lands_on_its_last_batch() -> None:
    """max_events_per_batch splits a step into consecutive seqs; the digest is on the last."""
    builder = _builder(max_events_per_batch=2, digest_every_batches=2)
    builder.open_epoch([], "d")
    batches = builder.step_batches([_stored(h) for h in range(5)], lambda: "dd")
    assert [b.seq for b in batches] == [1, 2, 3]
    assert [len(b.events) for b in batches] == [2, 2, 1]
    assert [b.digest for b in batches] == [None, None, "dd"]


def test_stepping_before_an_epoch_is_refused() -> None:
    """step_batches before open_epoch is a programming error, reported clearly."""
    with pytest.raises(RuntimeError, match="open_epoch"):
        _builder().step_batches([_stored(1)], lambda: "x")


@pytest.mark.parametrize(
    "name", ["digest_every_batches", "max_events_per_batch", "max_batch_bytes"]
)
def test_bad_sizes_are_rejected_by_name(name: str) -> None:
    """Non-positive sizes raise ValueError naming the argument."""
    with pytest.raises(ValueError, match=name):
        _builder(**{name: 0})


def test_batches_stay_under_max_batch_bytes() -> None:
    """Big pages are split by encoded size; every encoded batch fits max_batch_bytes."""
    limit = 64 * 1024
    builder = _builder(max_batch_bytes=limit)
    builder.open_epoch([], "d")
    big = 0xFFFFFFFF
    events = [BlockStored((-(2**63) + h,), 2**63 - 1, (big,) * 1000, 1000) for h in range(40)]
    batches = builder.step_batches(events, lambda: "0" * 16)
    assert len(batches) > 1
    assert sum(len(b.events) for b in batches) == 40
    assert all(len(encode_batch(b)) <= limit for b in batches)


def test_the_size_bound_is_an_upper_bound() -> None:
    """encoded_size_bound is never below an event's real encoded size, for every event type."""
    extreme = -(2**63)
    events: list[Event] = [
        BlockStored((extreme,), extreme, (0xFFFFFFFF,) * 64, 64, lora_id=None, medium='"\\"'),
        BlockRemoved((extreme, extreme)),
        BlockSWAEvicted((extreme,)),
        AllBlocksCleared(),
    ]
    empty = len(encode_batch(EventBatch("w", "e", 0, 0.0, ())))
    for event in events:
        alone = len(encode_batch(EventBatch("w", "e", 0, 0.0, (event,)))) - empty
        assert alone <= encoded_size_bound(event), event
