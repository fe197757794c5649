"""Unit tests of the views: ReplicaSet / ReplicaTree, PrefixIndex and Stats."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from dataclasses import replace

import pytest

from cache.events import (
    REMOVED_DEMOTED,
    REMOVED_EVICTED,
    BatchMeta,
    BlockRemoved,
    BlockStored,
    BlockSWAEvicted,
    Event,
    EventBatch,
    decode_wire,
    encode_batch,
)
from consumers import (
    PrefixIndex,
    PrefixMatch,
    ReplicaConsistencyError,
    ReplicaSet,
    Stats,
    ViewStateError,
)
from tests.consumers.primary_model import PrimaryModel
from tests.fixtures.prompts import shrinking_prompt


def _fed(model: PrimaryModel, *views: ReplicaSet | PrefixIndex | Stats) -> None:
    first = model.start_epoch("e1")
    for view in views:
        view.apply(first)


def test_single_token_hashes_match_the_published_vectors() -> None:
    """The model's hashes are the sglang-compatible ones (test vectors of cache.events)."""
    model = PrimaryModel("w")
    assert model.hashes([1, 2]) == [7470307888890966271, -1634645291211865391]
    assert PrimaryModel("w", page_size=4).hashes([1, 2, 3, 4]) == [-3488128144981237669]


def test_replica_digest_follows_stores_tombstones_restores_and_removals() -> None:
    """After every kind of event the replica's digest equals the model primary's."""
    model, replicas = PrimaryModel("w"), ReplicaSet()
    _fed(model, replicas)
    steps: list[Callable[[], list[Event]]] = [
        lambda: model.store([1, 2, 3, 4, 5]),
        lambda: model.store([1, 2, 9, 9]),
        lambda: model.tombstone(model.hashes([1, 2])),
        lambda: model.revive(model.hashes([1])),
        lambda: model.remove(model.hashes([1, 2, 9, 9])[2:]),
    ]
    for step in steps:
        replicas.apply(model.batch(step()))
        assert replicas["w"].state_digest() == model.digest.hexdigest()
    tree = replicas["w"]
    assert len(tree) == 5
    assert tree.tombstone_count == 1
    block = tree.block(model.hashes([1, 2])[1])
    assert block.token_ids == (2,)
    assert block.parent_block_hash == model.hashes([1])[0]
    assert not block.swa_resident


def test_multi_page_blocks_keep_their_tokens() -> None:
    """With page_size 4 every block keeps its own four token ids, slots are reused."""
    model, replicas = PrimaryModel("w", page_size=4), ReplicaSet()
    _fed(model, replicas)
    replicas.apply(model.batch(model.store(list(range(12)))))
    hashes = model.hashes(list(range(12)))
    replicas.apply(model.batch(model.remove(hashes[2:])))
    replicas.apply(model.batch(model.store([*range(8), 7, 7, 7, 7])))
    tree = replicas["w"]
    assert [tree.block(h).token_ids for h in hashes[:2]] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert tree.block(model.hashes([*range(8), 7, 7, 7, 7])[2]).token_ids == (7, 7, 7, 7)
    assert tree.state_digest() == model.digest.hexdigest()


@pytest.mark.parametrize(
    ("make_event", "needle"),
    [
        (lambda: BlockStored((11,), 12345, (1,), 1), "unknown parent"),
        (lambda: BlockRemoved((999,)), "unknown block"),
        (lambda: BlockSWAEvicted((999,)), "unknown block"),
    ],
)
def test_events_naming_unknown_blocks_are_inconsistent(make_event: object, needle: str) -> None:
    """An event about a block or parent the replica does not hold raises, naming the source."""
    model, replicas = PrimaryModel("w"), ReplicaSet()
    _fed(model, replicas)
    assert callable(make_event)
    with pytest.raises(ReplicaConsistencyError, match=needle) as caught:
        replicas.apply(model.batch([make_event()]))
    assert caught.value.source == "w"


def test_removing_a_block_with_children_is_inconsistent() -> None:
    """A removal that would orphan children is refused."""
    model, replicas = PrimaryModel("w"), ReplicaSet()
    _fed(model, replicas)
    replicas.apply(model.batch(model.store([1, 2, 3])))
    with pytest.raises(ReplicaConsistencyError, match="children"):
        replicas.apply(model.batch([BlockRemoved((model.hashes([1])[0],))]))


def test_diverged_replica_refuses_to_tell_its_digest_until_cleared() -> None:
    """A diverged replica has no digest to tell (None); AllBlocksCleared heals it."""
    model, replicas = PrimaryModel("w"), ReplicaSet()
    _fed(model, replicas)
    replicas.mark_diverged("w", "test")
    assert replicas["w"].state_digest() is None
    assert replicas["w"].diverged == "test"
    replicas.apply(model.start_epoch("e2"))
    assert replicas["w"].state_digest() == model.digest.hexdigest()


def test_replica_set_snapshot_round_trips() -> None:
    """load(snapshot()) gives back the same blocks, digest, tombstones and meta."""
    replicas = ReplicaSet()
    models = [PrimaryModel(f"w{i}", page_size=1 + i) for i in range(3)]
    for model in models:
        _fed(model, replicas)
        replicas.apply(model.batch(model.store(list(range(30)))))
        replicas.apply(model.batch(model.store([*range(5), 77, 78, 79, 80, 81, 82])))
        replicas.apply(model.batch(model.tombstone(model.hashes(list(range(4)))[:2])))
        replicas.apply(model.batch(model.remove(model.hashes(list(range(30)))[6:])))
    restored = ReplicaSet()
    restored.load(replicas.snapshot())
    for model in models:
        before, after = replicas[model.source], restored[model.source]
        assert after.state_digest() == before.state_digest() == model.digest.hexdigest()
        assert sorted(after.blocks(), key=hash) == sorted(before.blocks(), key=hash)
        assert after.meta == before.meta
        assert after.tombstone_count == before.tombstone_count
    # the restored replica keeps working (free slots included)
    model = models[0]
    restored.apply(model.batch(model.store([5, 5, 5])))
    assert restored["w0"].state_digest() == model.digest.hexdigest()


def test_replica_sets_with_and_without_token_ids_agree_and_restore_one_way() -> None:
    """A set that keeps no token ids holds the same blocks, digests, tombstones and prefix
    matches (its blocks' token_ids None); it loads a snapshot with token ids (dropping them),
    while a set that keeps them refuses a snapshot without (ViewStateError, state kept)."""
    kept, bare = ReplicaSet(), ReplicaSet(keep_tokens=False)
    kept_index, bare_index = PrefixIndex(kept), PrefixIndex(bare)
    model = PrimaryModel("w", page_size=2, sliding_window_size=3)
    _fed(model, kept, bare)
    for events in (
        model.store(list(range(30))),
        model.store([*range(5), 77, 78, 79, 80]),
        model.tombstone(model.hashes(list(range(8)))[1:3]),
        model.remove(model.hashes(list(range(30)))[10:]),
    ):
        batch = model.batch(events)
        kept.apply(batch)
        bare.apply(batch)
    assert (kept.keeps_tokens, bare.keeps_tokens) == (True, False)
    assert bare["w"].state_digest() == kept["w"].state_digest() == model.digest.hexdigest()
    assert bare["w"].tombstone_count == kept["w"].tombstone_count
    with_tokens = {b.block_hash: b for b in kept["w"].blocks()}
    without = {b.block_hash: b for b in bare["w"].blocks()}
    assert without == {h: replace(b, token_ids=None) for h, b in with_tokens.items()}
    for prompt in ([*range(30)], [*range(5), 77, 78, 79], [1, 2, 3]):
        assert bare_index.match(prompt) == kept_index.match(prompt)
    dropped = ReplicaSet(keep_tokens=False)
    dropped.load(kept.snapshot())
    assert {b.block_hash: b for b in dropped["w"].blocks()} == without
    assert not dropped.keeps_tokens and dropped["w"].state_digest() == model.digest.hexdigest()
    with pytest.raises(ViewStateError, match="holds no token ids"):
        kept.load(bare.snapshot())
    assert {b.block_hash: b for b in kept["w"].blocks()} == with_tokens


def test_replica_set_load_rejects_bad_bytes_and_keeps_its_state() -> None:
    """Truncated or foreign bytes raise ViewStateError; the current state stays."""
    model, replicas = PrimaryModel("w"), ReplicaSet()
    _fed(model, replicas)
    replicas.apply(model.batch(model.store([1, 2, 3])))
    data = replicas.snapshot()
    for bad in (data[:-1], b"XXXX" + data[4:], data + b"\0", b""):
        with pytest.raises(ViewStateError):
            replicas.load(bad)
    assert replicas["w"].state_digest() == model.digest.hexdigest()


def _swa_model() -> tuple[PrimaryModel, PrefixIndex]:
    model, index = PrimaryModel("w", page_size=1, sliding_window_size=3), PrefixIndex(ReplicaSet())
    _fed(model, index.replicas)
    index.replicas.apply(model.batch(model.store(list(range(10)))))
    return model, index


def test_prefix_index_without_tombstones_matches_everything_held() -> None:
    """With no tombstone the usable prefix is the held prefix; a longer request stops there."""
    _, index = _swa_model()
    assert index.match(list(range(10))) == {"w": PrefixMatch(10, 10)}
    assert index.match([*range(6), 99]) == {"w": PrefixMatch(6, 6)}
    assert index.match([99]) == {}


def test_prefix_index_reads_a_list_that_an_index_method_shortens() -> None:
    """A token whose ``__index__`` shortens the prompt list ends the read there, safely."""
    _, index = _swa_model()
    assert index.match(shrinking_prompt()) == {"w": PrefixMatch(4, 4)}  # type: ignore[arg-type]


def test_prefix_index_applies_the_swa_rule_after_a_tombstone() -> None:
    """After a tombstone at page 3 a match may end only once 3 more resident tokens follow."""
    model, index = _swa_model()
    index.replicas.apply(model.batch(model.tombstone(model.hashes(list(range(10)))[3:4])))
    expected = {4: 3, 5: 3, 6: 3, 7: 7, 10: 10}
    for length, usable in expected.items():
        assert index.match(list(range(length))) == {"w": PrefixMatch(length, usable)}


def test_prefix_index_tombstone_near_the_end_limits_the_usable_prefix() -> None:
    """A tombstone two pages before the end leaves the usable prefix before it."""
    model, index = _swa_model()
    index.replicas.apply(model.batch(model.tombstone(model.hashes(list(range(10)))[7:9])))
    assert index.match(list(range(10))) == {"w": PrefixMatch(10, 7)}


def test_prefix_index_respects_namespaces_and_page_sizes() -> None:
    """Different extra_key values never share blocks; each source uses its own page size."""
    replicas = ReplicaSet()
    index = PrefixIndex(replicas)
    small, large = PrimaryModel("small"), PrimaryModel("large", page_size=4)
    for model in (small, large):
        _fed(model, replicas)
        replicas.apply(model.batch(model.store(list(range(10)))))
    keyed = PrimaryModel("keyed")
    _fed(keyed, replicas)
    replicas.apply(keyed.batch(keyed.store(list(range(10)), extra_key="lora-a")))
    assert index.match(list(range(10))) == {
        "small": PrefixMatch(10, 10),
        "large": PrefixMatch(8, 8),
    }
    assert index.match(list(range(10)), extra_key="lora-a") == {"keyed": PrefixMatch(10, 10)}


def test_prefix_index_reports_diverged_sources_as_unknown() -> None:
    """A diverged source is present with PrefixMatch.unknown(), never with a guess."""
    _, index = _swa_model()
    index.replicas.mark_diverged("w", "gap")
    (only,) = index.match(list(range(10))).values()
    assert only == PrefixMatch.unknown()
    assert not only.known


def test_prefix_index_over_shared_replicas_keeps_no_copy() -> None:
    """PrefixIndex(replicas) answers from the given set and snapshots nothing itself."""
    model, replicas = PrimaryModel("w"), ReplicaSet()
    index = PrefixIndex(replicas)
    for view in (replicas, index):
        view.apply(model.start_epoch("e"))
    batch = model.batch(model.store([4, 5, 6]))
    replicas.apply(batch)
    index.apply(batch)
    assert index.match([4, 5, 6, 7]) == {"w": PrefixMatch(3, 3)}
    assert index.snapshot() == b""
    with pytest.raises(ViewStateError):
        index.load(b"something")


def test_stats_count_blocks_tombstones_and_churn() -> None:
    """Stats reports blocks, tombstones and churn per source and survives a snapshot."""
    model, replicas = PrimaryModel("w"), ReplicaSet()
    stats = Stats(replicas)
    _fed(model, replicas, stats)
    for events in (
        model.store([1, 2, 3, 4]),
        model.tombstone(model.hashes([1, 2])),
        model.revive(model.hashes([1])),
        model.remove(model.hashes([1, 2, 3, 4])[3:]),
    ):
        batch = model.batch(events)
        replicas.apply(batch)
        stats.apply(batch)
    counts = stats.get("w").as_dict()
    assert counts == {
        "blocks": 3,
        "tombstones": 1,
        "diverged": None,
        "batches": 5,
        "stored": 4,
        "removed": 1,
        "swa_evicted": 2,
        "swa_restored": 1,
        "cleared": 1,
        "removed_by": {"GPU": {"unsaid": 1}},
    }
    restored = ReplicaSet()
    restored.load(replicas.snapshot())
    again = Stats(restored)
    again.load(stats.snapshot())
    assert again.as_dict() == stats.as_dict()
    for bad in (b'{"w": {"stored": -1}}\n', b"{}\nreplica bytes"):
        with pytest.raises(ViewStateError):
            again.load(bad)


def test_stats_split_removals_by_tier_and_reason_alike_on_both_paths() -> None:
    """A record's removals are counted per (medium, reason) the same whether its events are
    made (``apply``) or counted natively (``apply_wire``); an old snapshot without the split
    still loads."""
    removals: tuple[Event, ...] = (
        BlockRemoved((1, 2), "GPU", REMOVED_DEMOTED),
        BlockRemoved((3,), None, REMOVED_EVICTED),
        BlockRemoved((4, 5, 6), "CPU", REMOVED_EVICTED),
        BlockRemoved((7,), "STORAGE"),
        BlockRemoved((8,), "GPU", REMOVED_EVICTED),
    )
    batch = EventBatch("w", "e1", 0, 1.0, removals)
    made, counted = Stats(ReplicaSet()), Stats(ReplicaSet())
    made.apply(batch)
    counted.apply_wire(decode_wire(encode_batch(batch)))
    expected = {
        "GPU": {"demoted": 2, "evicted": 2},
        "CPU": {"evicted": 3},
        "STORAGE": {"unsaid": 1},
    }
    assert made.get("w").churn.removed_by == expected == counted.get("w").churn.removed_by
    assert made.get("w").churn.removed == 8
    old = b'{"w": {"batches": 1, "stored": 0, "removed": 8, "swa_evicted": 0, '
    old += b'"swa_restored": 0, "cleared": 0}}\n'
    made.load(old)
    assert made.get("w").churn.removed_by == {}


def test_meta_with_a_bad_page_size_never_reaches_a_view() -> None:
    """meta.page_size must be a positive int: BatchMeta (and so the decoder) refuses it."""
    with pytest.raises(ValueError, match="page_size"):
        BatchMeta(page_size=0, sliding_window_size=4)


def test_a_replica_block_costs_at_most_200_bytes() -> None:
    """tracemalloc: 50k single-token blocks in a replica take no more than 200 bytes each."""
    model = PrimaryModel("w")
    batches = [model.start_epoch("e")]
    batches += [model.batch(model.store([i, i + 1, i + 2, i + 3, i + 4])) for i in range(10_000)]
    blocks = len(model.blocks)
    tracemalloc.start()
    try:
        replicas = ReplicaSet()
        before, _ = tracemalloc.get_traced_memory()
        for batch in batches:
            replicas.apply(batch)
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(replicas["w"]) == blocks == 50_000
    assert (after - before) / blocks <= 200


def test_a_source_without_swa_events_reports_its_usable_length_as_unknown() -> None:
    """meta "swa_events": false (a stream bridged from an engine): held length, usable None."""
    model, replicas = PrimaryModel("w", page_size=1, sliding_window_size=3), ReplicaSet()
    index = PrefixIndex(replicas)
    first = model.start_epoch("e")
    assert first.meta is not None
    meta = BatchMeta.from_dict({**first.meta, "swa_events": False})
    replicas.apply(EventBatch(first.source, first.epoch, 0, first.ts, first.events, None, meta))
    replicas.apply(model.batch(model.store(list(range(5)))))
    assert index.match(list(range(8))) == {"w": PrefixMatch(5, None)}
    bad = {**meta, "swa_events": "no"}  # what BatchMeta refuses; the view refuses it too
    with pytest.raises(ReplicaConsistencyError, match="swa_events"):
        replicas.apply(EventBatch("x", "e", 0, 0.0, (), meta=bad))  # type: ignore[arg-type]
