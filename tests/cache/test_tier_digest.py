"""A lower tier's digest term: the native core, its pure-Python reference and the Python
``StateDigest`` agree, and a replica's digest counts its tiers' blocks as the accumulator does."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cache.events import BlockRemoved, BlockStored
from cache.events import digest as native
from cache.events.replica_store import ReplicaConsistencyError, ReplicaStore
from tests.oracles import digest as reference

INT64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
MEDIA = st.sampled_from(["CPU", "STORAGE", "CPU_PINNED", "DISK", "EXTERNAL", "É"]) | st.text(
    min_size=1
).filter(lambda name: name != "GPU")


@given(INT64, MEDIA)
def test_tier_term_equals_the_reference(block_hash: int, medium: str) -> None:
    """One tier block's term is the same from both, and never the block's GPU term."""
    term = native.tier_term(block_hash, medium)
    assert term == reference.tier_term(block_hash, medium)
    for parent in (None, 0, block_hash):
        for resident in (False, True):
            assert term != native.block_term(block_hash, parent, resident)


def test_pinned_tier_values() -> None:
    """The values the Rust tests pin."""
    assert native.format_digest(reference.medium_key("CPU")) == "0b453a19aa0f85a9"
    assert native.format_digest(native.tier_term(1, "CPU")) == "123641f9de6d8aa7"


def test_the_gpu_is_not_a_tier() -> None:
    """``"GPU"`` blocks take ``block_term``: asking a tier term for it is a ValueError."""
    for term in (native.tier_term, reference.tier_term):
        with pytest.raises(ValueError, match="medium"):
            term(1, "GPU")
    with pytest.raises(ValueError, match="medium"):
        native.StateDigest().add_tier(1, "GPU")


def _stored(hashes: list[int], parent: int | None, medium: str | None) -> BlockStored:
    return BlockStored(
        block_hashes=tuple(hashes),
        parent_block_hash=parent,
        token_ids=tuple(h % 1000 for h in hashes),
        block_size=1,
        lora_id=None,
        medium=medium,
    )


def test_a_replica_digest_counts_tier_blocks_as_the_python_accumulator_does() -> None:
    """The native replica's digest after GPU and tier stores and removals equals a Python
    ``StateDigest`` fed the same blocks (what a bridge's mirror computes)."""
    store = ReplicaStore()
    store.apply_events(
        "a",
        [
            _stored([1, 2, 3], None, None),
            _stored([2, 3, 4], 1, "CPU"),
            _stored([7], 99, "CPU_PINNED"),
            _stored([5], 3, "GPU"),
            BlockRemoved(block_hashes=(3,), medium="CPU", reason="evicted"),
            BlockRemoved(block_hashes=(5,), medium=None),
        ],
    )
    expected = native.StateDigest()
    expected.add(1, None, True)
    expected.add(2, 1, True)
    expected.add(3, 2, True)
    for block_hash, medium in ((2, "CPU"), (3, "CPU"), (4, "CPU"), (7, "CPU_PINNED")):
        expected.add_tier(block_hash, medium)
    expected.remove_tier(3, "CPU")
    assert store.digest_value("a") == expected.hexdigest()
    assert store.tiers("a") == [("CPU", 2), ("CPU_PINNED", 1)]
    assert store.tier_holds("a", "CPU", 4) and not store.tier_holds("a", "CPU", 3)
    with pytest.raises(ReplicaConsistencyError, match="unknown block 3 on CPU"):
        store.apply_events("a", [BlockRemoved(block_hashes=(3,), medium="CPU")])
    assert store.digest_value("a") == expected.hexdigest()
    restored = ReplicaStore()
    restored.load(store.snapshot())
    assert restored.digest_value("a") == expected.hexdigest()
    assert restored.tiers("a") == store.tiers("a")
