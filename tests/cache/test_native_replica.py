"""The native replica store equals its pure-Python reference on any event stream.

Streams are random and often malformed (unknown parents and blocks, blocks stored twice or named
twice, removals of blocks with children, block sizes that change); after every event both sides
hold the same blocks and digest, or raise the same error and change nothing. A store that keeps
no token ids (``ReplicaStore(keep_tokens=False)``) does the same, with None for each block's tokens.
Some stores come without token ids (withheld by a token-free writer): a store that keeps them
refuses those, one that keeps none applies them as any other.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
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
    chain_block_hashes,
    namespace_prior,
)
from cache.events.replica_store import (
    ReplicaConsistencyError,
    ReplicaSnapshotError,
    ReplicaStore,
)
from cache.events.swa_rule import usable_prefix
from tests.oracles import swa_rule as swa_rule_oracle
from tests.oracles.replica import ReferenceReplicaSet

SOURCES = ("a", "b")
# A small pool makes unknown, duplicate and already-held hashes frequent; two large values
# check the int64 range.
hash_pool = st.integers(min_value=0, max_value=12) | st.sampled_from([-(1 << 63), (1 << 63) - 1])
hash_lists = st.lists(hash_pool, min_size=1, max_size=4)


@st.composite
def stored_events(draw: st.DrawFn) -> BlockStored:
    hashes = tuple(draw(hash_lists))
    block_size = draw(st.sampled_from([1, 1, 1, 2]))
    tokens = tuple(draw(st.integers(0, (1 << 32) - 1)) for _ in range(block_size * len(hashes)))
    if draw(st.integers(0, 4)) == 0:
        tokens = ()  # withheld by the writer
    parent = draw(st.none() | hash_pool)
    return BlockStored(hashes, parent, tokens, block_size)


events = st.one_of(
    stored_events(),
    stored_events(),
    hash_lists.map(lambda h: BlockRemoved(tuple(h))),
    hash_lists.map(lambda h: BlockSWAEvicted(tuple(h))),
    hash_lists.map(lambda h: BlockSWARestored(tuple(h))),
    st.just(AllBlocksCleared()),
)
steps = st.lists(
    st.tuples(st.sampled_from(SOURCES), events | st.just("diverge") | st.just("meta")),
    max_size=40,
)


def native_state(store: ReplicaStore, source: str) -> dict[str, Any]:
    """Everything the native store tells about one source."""
    return {
        "blocks": {h: (p, t, r) for h, p, t, r in store.blocks(source)},
        "len": store.block_count(source),
        "digest": store.digest_value(source),
        "state_digest": store.state_digest(source),
        "tombstones": store.tombstone_count(source),
        "block_size": store.block_size(source),
        "diverged": store.diverged(source),
    }


def reference_state(
    reference: ReferenceReplicaSet, source: str, *, keep_tokens: bool = True
) -> dict[str, Any]:
    """The same facts from the reference (token ids None for a store that keeps none)."""
    replica = reference.replica(source)
    return {
        "blocks": {
            h: (b.parent, b.tokens if keep_tokens else None, b.resident)
            for h, b in replica.blocks.items()
        },
        "len": len(replica.blocks),
        "digest": replica.digest.hexdigest(),
        "state_digest": None if replica.diverged else replica.digest.hexdigest(),
        "tombstones": replica.tombstone_count,
        "block_size": replica.block_size,
        "diverged": replica.diverged,
    }


def apply_both(
    store: ReplicaStore, reference: ReferenceReplicaSet, source: str, step: Event | str
) -> None:
    """One step on both sides; the same error or none."""
    if step == "diverge":
        store.mark_diverged(source, "test")
        reference.mark_diverged(source, "test")
        return
    if step == "meta":
        store.set_meta(source, BatchMeta(1, 3))
        reference.set_meta(source, {"page_size": 1, "sliding_window_size": 3})
        return
    assert not isinstance(step, str)
    outcomes: list[tuple[str, str] | None] = []
    for apply in (store.apply_events, reference.apply_events):
        try:
            apply(source, [step])
            outcomes.append(None)
        except ReplicaConsistencyError as exc:
            outcomes.append((exc.source, exc.reason))
    assert outcomes[0] == outcomes[1], step


@settings(max_examples=300, deadline=None)
@given(steps, st.booleans())
def test_random_streams_give_the_same_state_digest_and_errors(
    stream: list[tuple[str, Event | str]], keep_tokens: bool
) -> None:
    """After every event: same blocks, digest, counts and divergence, or the same error; with
    or without token ids kept."""
    store = ReplicaStore(keep_tokens=keep_tokens)
    reference = ReferenceReplicaSet(keep_tokens=keep_tokens)
    for source in SOURCES:
        store.add_source(source)
        reference.replica(source)
    for source, step in stream:
        apply_both(store, reference, source, step)
        expected = reference_state(reference, source, keep_tokens=keep_tokens)
        assert native_state(store, source) == expected


@settings(max_examples=100, deadline=None)
@given(steps, st.booleans(), st.booleans())
def test_a_snapshot_loads_to_the_same_state_and_keeps_working(
    stream: list[tuple[str, Event | str]], written_with_tokens: bool, loaded_with_tokens: bool
) -> None:
    """load(snapshot()) gives the same replicas, which then evolve as the reference does; a
    store that keeps no token ids drops a snapshot's, and one that keeps them refuses a
    snapshot without them (changing nothing)."""
    store = ReplicaStore(keep_tokens=written_with_tokens)
    reference = ReferenceReplicaSet(keep_tokens=written_with_tokens)
    for source in SOURCES:
        store.add_source(source)
        reference.replica(source)
    half = len(stream) // 2
    for source, step in stream[:half]:
        apply_both(store, reference, source, step)
    restored = ReplicaStore(keep_tokens=loaded_with_tokens)
    if loaded_with_tokens and not written_with_tokens:
        with pytest.raises(ReplicaSnapshotError, match="holds no token ids"):
            restored.load(store.snapshot())
        assert restored.sources() == [] and restored.keeps_tokens
        return
    restored.load(store.snapshot())
    assert restored.keeps_tokens == loaded_with_tokens
    if loaded_with_tokens == written_with_tokens:
        assert restored.snapshot() == store.snapshot()
    for replica in reference.replicas.values():
        replica.keep_tokens = loaded_with_tokens
    for source, step in stream[half:]:
        apply_both(restored, reference, source, step)
    for source in SOURCES:
        expected = reference_state(reference, source, keep_tokens=loaded_with_tokens)
        assert native_state(restored, source) == expected


def test_a_corrupt_snapshot_is_refused_and_the_state_kept() -> None:
    """Any flipped byte, a truncation or a foreign magic raises; nothing is loaded."""
    store = ReplicaStore()
    store.apply_events("w", [AllBlocksCleared(), BlockStored((1, 2), None, (5, 6), 1)])
    data = store.snapshot()
    for bad in (data[:-1], b"XXXX" + data[4:], data + b"\0", b"", data[:12]):
        with pytest.raises(ReplicaSnapshotError):
            store.load(bad)
    for at in range(len(data)):
        flipped = bytearray(data)
        flipped[at] ^= 0x01
        with pytest.raises(ReplicaSnapshotError):
            store.load(bytes(flipped))
    assert store.block_count("w") == 2


# --- prefix matching --------------------------------------------------------------------------


@st.composite
def fleets(draw: st.DrawFn) -> tuple[ReplicaStore, ReferenceReplicaSet, list[list[int]]]:
    """Sources holding random prompts (real chained hashes), some tombstoned or diverged, in a
    store that keeps token ids or one that keeps none (whose sources' writers may withhold
    them)."""
    keep_tokens = draw(st.booleans())
    store = ReplicaStore(keep_tokens=keep_tokens)
    reference = ReferenceReplicaSet(keep_tokens=keep_tokens)
    prompts = draw(
        st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=24), min_size=1, max_size=4)
    )
    for index in range(draw(st.integers(1, 5))):
        source = f"w{index}"
        page_size = draw(st.sampled_from([1, 2, 4]))
        window = draw(st.integers(1, 6))
        swa_events = draw(st.booleans())
        meta = {"page_size": page_size, "sliding_window_size": window, "swa_events": swa_events}
        if draw(st.booleans()) or index == 0:
            store.set_meta(source, BatchMeta(page_size, window, swa_events=swa_events))
            reference.set_meta(source, meta)
        extra_key = draw(st.none() | st.just("lora"))
        withheld = not keep_tokens and draw(st.booleans())
        for prompt in draw(st.lists(st.sampled_from(prompts), max_size=3)):
            stored = _stored_chain(reference, source, prompt, page_size, extra_key)
            if stored is not None:
                if withheld:
                    stored = replace(stored, token_ids=())
                store.apply_events(source, [stored])
                reference.apply_events(source, [stored])
        held = sorted(reference.replica(source).blocks)
        tombstoned = draw(st.lists(st.sampled_from(held), max_size=4)) if held else []
        if tombstoned:
            store.apply_events(source, [BlockSWAEvicted(tuple(tombstoned))])
            reference.apply_events(source, [BlockSWAEvicted(tuple(tombstoned))])
        if draw(st.integers(0, 9)) == 0:
            store.mark_diverged(source, "gap")
            reference.mark_diverged(source, "gap")
    return store, reference, prompts


def _stored_chain(
    reference: ReferenceReplicaSet,
    source: str,
    prompt: list[int],
    page_size: int,
    extra_key: str | None,
) -> BlockStored | None:
    """A BlockStored of the pages of ``prompt`` not held yet (None when all are held)."""
    hashes = chain_block_hashes(namespace_prior(extra_key), prompt, page_size)
    blocks = reference.replica(source).blocks
    held = 0
    while held < len(hashes) and hashes[held] in blocks:
        held += 1
    if held == len(hashes):
        return None
    parent = hashes[held - 1] if held else None
    tokens = tuple(prompt[held * page_size : len(hashes) * page_size])
    return BlockStored(tuple(hashes[held:]), parent, tokens, page_size)


@settings(max_examples=200, deadline=None)
@given(fleets(), st.data())
def test_prefix_match_equals_the_reference(
    fleet: tuple[ReplicaStore, ReferenceReplicaSet, list[list[int]]], data: st.DataObject
) -> None:
    """Held and SWA-usable lengths per source, unknown and absent sources, as the reference."""
    store, reference, prompts = fleet
    base = data.draw(st.sampled_from(prompts))
    query = base[: data.draw(st.integers(0, len(base)))] + data.draw(
        st.lists(st.integers(0, 3), max_size=6)
    )
    for extra_key in (None, "lora"):
        native = {s: (h, u) for s, h, u in store.match_prefix(query, extra_key)}
        assert native == reference.match(query, extra_key)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 16), st.booleans()), max_size=30), st.integers(1, 40))
def test_the_native_swa_rule_equals_its_python_oracle(
    segments: list[tuple[int, bool]], window: int
) -> None:
    """The native rule (cache.events.swa_rule's) gives its oracle's walked and usable counts."""
    assert usable_prefix(segments, window) == swa_rule_oracle.usable_prefix(segments, window)


def test_bad_arguments_raise_value_errors() -> None:
    """Out-of-range token ids, a zero block size, or a non-event are refused, named as the
    codec's encoder names them (``events[i].field``)."""
    store = ReplicaStore()
    with pytest.raises(ValueError, match=r"events\[0\]\.token_ids\[0\]: token id -1"):
        store.apply_events("w", [BlockStored((1,), None, (-1,), 1)])
    with pytest.raises(ValueError, match=r"events\[1\]\.block_size"):
        store.apply_events("w", [AllBlocksCleared(), BlockStored((1,), None, (), 0)])
    with pytest.raises(ValueError, match=r"events\[0\]: not an event"):
        store.apply_events("w", [object()])
    with pytest.raises(ValueError, match="token id"):
        store.match_prefix([1 << 32])
