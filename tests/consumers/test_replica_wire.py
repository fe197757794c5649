"""The native record path equals the EventBatch path and the pure-Python reference.

Random streams (often inconsistent: unknown parents and blocks, blocks stored or named twice,
removals of blocks with children, block sizes that change, clears) are written as records,
v2 (consecutive chained stores joined into one event) or v1 (one object per page), and decoded.
Each record is then applied three ways: ``ReplicaSet.apply_wire`` (the store reads the natively
held batch), ``ReplicaSet.apply`` of its ``EventBatch`` (one event per page), and the reference
replica set. After every record all three hold the same blocks and digests or raised the same
error, and a ``PrefixIndex`` kept in step from the start answers every prompt as the reference.
The block hashes are real chained hashes of a few short prompts, so prompts match partly.
"""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from cache.events import (
    AllBlocksCleared,
    BatchMeta,
    BlockRemoved,
    BlockStored,
    BlockSWAEvicted,
    BlockSWARestored,
    Event,
    EventBatch,
    chain_block_hashes,
    decode_wire,
    encode_batch,
)
from cache.events.replica_store import ReplicaConsistencyError
from consumers import PrefixIndex, ReplicaSet
from tests.oracles.codec import batch_to_v1_pages_dict
from tests.oracles.replica import ReferenceReplicaSet

PROMPTS = ([3, 1, 4, 1, 5, 9, 2, 6], [3, 1, 4, 2, 7, 1, 8, 2], [2, 7, 1, 8])
CHAINS = {size: [chain_block_hashes(b"", p, size) for p in PROMPTS] for size in (1, 2)}
POOL = sorted({h for chains in CHAINS.values() for chain in chains for h in chain})
SOURCES = ("a", "b")

pool_hashes = st.sampled_from(POOL)


@st.composite
def chain_stores(draw: st.DrawFn) -> list[Event]:
    """A run of a prompt's chain stored as one or more consecutive BlockStored events (which
    v2 joins), from a random page, under its real parent or a random one."""
    size = draw(st.sampled_from([1, 1, 2]))
    prompt_index = draw(st.integers(0, len(PROMPTS) - 1))
    chain, prompt = CHAINS[size][prompt_index], PROMPTS[prompt_index]
    start = draw(st.integers(0, len(chain) - 1))
    end = draw(st.integers(start + 1, len(chain)))
    parent = chain[start - 1] if start else None
    if draw(st.integers(0, 2)) == 0:
        parent = draw(st.none() | pool_hashes)
    cuts = sorted(draw(st.sets(st.integers(start + 1, end), max_size=2)) - {end})
    events: list[Event] = []
    for first, last in zip([start, *cuts], [*cuts, end], strict=True):
        tokens = tuple(prompt[first * size : last * size])
        events.append(BlockStored(tuple(chain[first:last]), parent, tokens, size))
        parent = chain[last - 1]
    return events


hash_lists = st.lists(pool_hashes, min_size=1, max_size=3)
other_events = st.one_of(
    hash_lists.map(lambda h: BlockRemoved(tuple(h))),
    hash_lists.map(lambda h: BlockSWAEvicted(tuple(h))),
    hash_lists.map(lambda h: BlockSWARestored(tuple(h))),
    st.just(AllBlocksCleared()),
)
batch_events = st.lists(
    chain_stores() | other_events.map(lambda e: [e]) | chain_stores(), min_size=1, max_size=5
).map(lambda runs: [event for run in runs for event in run])
streams = st.lists(
    st.tuples(st.sampled_from(SOURCES), batch_events, st.sampled_from([1, 2])), max_size=12
)


def _state(replicas: ReplicaSet, source: str) -> dict[str, Any]:
    tree = replicas[source]
    return {
        "blocks": {
            (b.block_hash, b.parent_block_hash, b.token_ids, b.swa_resident) for b in tree.blocks()
        },
        "digest": tree.digest_value(),
        "tombstones": tree.tombstone_count,
        "block_size": tree.block_size,
    }


def _reference_state(reference: ReferenceReplicaSet, source: str) -> dict[str, Any]:
    replica = reference.replica(source)
    return {
        "blocks": {(h, b.parent, b.tokens, b.resident) for h, b in replica.blocks.items()},
        "digest": replica.digest.hexdigest(),
        "tombstones": replica.tombstone_count,
        "block_size": replica.block_size,
    }


def _outcome(apply: Any, batch: Any) -> tuple[str, str] | None:
    try:
        apply(batch)
    except ReplicaConsistencyError as exc:
        return (exc.source, exc.reason)
    return None


@settings(max_examples=300, deadline=None)
@given(streams)
def test_apply_wire_equals_the_event_batch_path_and_the_reference(
    stream: list[tuple[str, list[Event], int]],
) -> None:
    """Same blocks, digest and errors after every record, whichever way it was applied; a
    prefix index kept in step answers as the reference."""
    wired, evented, reference = ReplicaSet(), ReplicaSet(), ReferenceReplicaSet()
    index = PrefixIndex(wired)
    seqs = dict.fromkeys(SOURCES, -1)
    for source, events, version in stream:
        seqs[source] += 1
        meta = BatchMeta(events[0].block_size if isinstance(events[0], BlockStored) else 1, 3)
        batch = EventBatch(source, "e", seqs[source], 0.0, tuple(events), None, meta)
        record = (
            encode_batch(batch) if version == 2 else orjson.dumps(batch_to_v1_pages_dict(batch))
        )
        wire = decode_wire(record)
        decoded = wire.to_batch()
        outcomes = [
            _outcome(wired.apply_wire, wire),
            _outcome(evented.apply, decoded),
            _outcome(reference.apply, decoded),
        ]
        assert outcomes[0] == outcomes[1] == outcomes[2], (events, version)
        expected = _reference_state(reference, source)
        assert _state(wired, source) == expected
        assert _state(evented, source) == expected
    for prompt in PROMPTS:
        for length in range(len(prompt) + 1):
            matches = index.match(prompt[:length])
            got = {s: (m.full_tokens, m.swa_tokens) for s, m in matches.items()}
            assert got == reference.match(prompt[:length])


def test_a_joined_chain_that_stops_fitting_keeps_the_pages_before() -> None:
    """v2 joins consecutive chained stores into one event; when a page of it is held already,
    the pages before it stay applied, as they do when the record's events come one per page."""
    chain, prompt = CHAINS[1][0], PROMPTS[0]
    meta = BatchMeta(1, 3)
    first = EventBatch(
        "a",
        "e",
        0,
        0.0,
        (
            AllBlocksCleared(),
            BlockStored((chain[0],), None, (prompt[0],), 1),
            BlockStored((chain[2], chain[3]), chain[0], tuple(prompt[2:4]), 1),
        ),
        None,
        meta,
    )
    joined = EventBatch(
        "a",
        "e",
        1,
        0.0,
        (
            BlockStored((chain[1], chain[2]), chain[0], tuple(prompt[1:3]), 1),
            BlockStored((chain[3], chain[4]), chain[2], tuple(prompt[3:5]), 1),
        ),
    )
    wire = decode_wire(encode_batch(joined))
    assert len(orjson.loads(encode_batch(joined))["events"]) == 1  # one joined event
    wired, reference = ReplicaSet(), ReferenceReplicaSet()
    wired.apply_wire(decode_wire(encode_batch(first)))
    reference.apply(first)
    assert _outcome(wired.apply_wire, wire) == _outcome(reference.apply, wire.to_batch())
    assert _state(wired, "a") == _reference_state(reference, "a")
    assert chain[1] in wired["a"]
