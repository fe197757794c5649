"""Unit tests of eviction: LRU order, tombstoning vs deletion, cascades and the counts reported."""

from __future__ import annotations

import pytest

from cache.events import BlockRemoved, BlockSWAEvicted
from tests.cache.helpers import fill, make_cache
from tests.cache.scenarios import tombstoned_prefix


def test_full_eviction_takes_the_least_recent_leaf(device: str) -> None:
    """Of three leaves, the one not touched since its insert goes first."""
    cache = make_cache(device, window=1)
    fill(cache, [1, 2])
    fill(cache, [3, 4])
    fill(cache, [5, 6])
    cache.match_prefix([1, 2])
    cache.take_events()
    assert cache.evict(full_tokens=1).full_evicted == 2
    assert cache.match_prefix([3, 4]).indices.numel() == 0
    assert cache.match_prefix([1, 2]).indices.numel() == 2
    assert cache.match_prefix([5, 6]).indices.numel() == 2
    (removed,) = cache.take_events()
    assert isinstance(removed, BlockRemoved) and len(removed.block_hashes) == 2


def test_full_eviction_never_takes_an_internal_node_first(device: str) -> None:
    """An internal node is older than its children but only leaves are fully evicted."""
    cache = make_cache(device, window=1)
    fill(cache, [1, 2, 3])
    fill(cache, [1, 2, 4])
    result = cache.evict(full_tokens=1)
    assert result.full_evicted == 1
    assert cache.match_prefix([1, 2]).indices.numel() == 2
    cache.sanity_check(caller_held_full=0, caller_held_swa=0)


def test_swa_eviction_follows_lru_and_tombstones_internal_nodes(device: str) -> None:
    """SWA eviction deletes the least recent leaf, then tombstones the next (internal) node.

    Tree: [1,2] → {[3,4] → {[5,6], [7,8]}, [9,9]}; touching [1..6] then [1,2,9,9] leaves the
    order (most → least recent) [9,9], [1,2], [5,6], [3,4], [7,8]: on one path the node nearer
    the root is the less recent.
    """
    cache = make_cache(device, window=2)
    fill(cache, [1, 2, 3, 4, 5, 6])
    fill(cache, [1, 2, 3, 4, 7, 8])
    fill(cache, [1, 2, 9, 9])
    cache.match_prefix([1, 2, 3, 4, 5, 6])
    cache.match_prefix([1, 2, 9, 9])
    cache.take_events()
    result = cache.evict(swa_tokens=1)
    assert (result.full_evicted, result.swa_evicted) == (2, 2)  # leaf [7, 8] deleted
    assert [type(e) for e in cache.take_events()] == [BlockRemoved]
    result = cache.evict(swa_tokens=1)
    assert (result.full_evicted, result.swa_evicted) == (0, 2)  # [3, 4] tombstoned
    (tomb,) = cache.take_events()
    assert isinstance(tomb, BlockSWAEvicted) and len(tomb.block_hashes) == 2
    assert cache.match_prefix([1, 2, 3, 4, 5, 6]).indices.numel() == 6  # window 2 after it
    cache.sanity_check(caller_held_full=0, caller_held_swa=0)
    cache.take_events()
    # That match touched [5,6] then [1,2] (tombstone [3,4] is not in the SWA list): [9,9] is
    # now the least recent, then [1,2], then [5,6].
    assert (cache.evict(swa_tokens=1).full_evicted, len(cache.take_events())) == (2, 1)
    result = cache.evict(swa_tokens=1)
    assert (result.full_evicted, result.swa_evicted) == (0, 2)
    assert cache.root.children[1].swa_tombstone
    cache.take_events()
    full_before = cache.allocator.full_available_size()
    result = cache.evict(swa_tokens=1)
    # [5,6] is deleted; tombstones [3,4] and then [1,2] become leaves and go with it. As in
    # sglang, the SWA phase counts only the leaf itself as full tokens evicted.
    assert (result.full_evicted, result.swa_evicted) == (2, 2)
    assert cache.allocator.full_available_size() - full_before == 6
    assert [type(e) for e in cache.take_events()] == [BlockRemoved] * 3
    assert cache.total_size() == (0, 0)
    cache.sanity_check(caller_held_full=0, caller_held_swa=0)


@pytest.mark.parametrize("page_size", [1, 2, 4, 16])
def test_deleting_a_leaf_cascades_to_tombstoned_ancestors(device: str, page_size: int) -> None:
    """When X goes, tombstone P becomes a leaf and is removed too, each with a BlockRemoved."""
    s = tombstoned_prefix(device, page_size=page_size, window=1)
    cache = s.cache
    cache.take_events()
    result = cache.evict(full_tokens=1)
    assert result.full_evicted == len(s.px)
    assert result.swa_evicted == len(s.px) - len(s.p)
    events = cache.take_events()
    assert [type(e) for e in events] == [BlockRemoved, BlockRemoved]
    assert [len(e.block_hashes) for e in events] == [3, 2]  # type: ignore[union-attr]  # removals
    assert cache.total_size() == (0, 0)
    assert cache.allocator.full_available_size() == cache.allocator.full_size
    cache.sanity_check(caller_held_full=0, caller_held_swa=0)


def test_swa_deletion_of_a_leaf_also_cascades(device: str) -> None:
    """An SWA eviction that deletes X also removes tombstone P and frees its full slots."""
    s = tombstoned_prefix(device, page_size=1, window=1)
    s.cache.take_events()
    s.cache.evict(swa_tokens=1)
    assert [type(e) for e in s.cache.take_events()] == [BlockRemoved, BlockRemoved]
    assert s.cache.total_size() == (0, 0)
    assert s.cache.allocator.full_available_size() == s.cache.allocator.full_size


def test_swa_phase_counts_only_the_deleted_leaf_as_full(device: str) -> None:
    """The SWA phase reports X's own tokens as full evicted, not tombstone P's (sglang 0.5.16).

    sglang's SWA phase drops the count of the tombstoned ancestors its leaf deletion takes
    with it, while the full phase adds it (see the full-phase cascade test above).
    """
    s = tombstoned_prefix(device, page_size=1, window=1)
    result = s.cache.evict(swa_tokens=1)
    x = len(s.px) - len(s.p)
    assert (result.full_evicted, result.swa_evicted) == (x, x)
    assert s.cache.allocator.full_available_size() == s.cache.allocator.full_size


def test_eviction_stops_when_nothing_is_left(device: str) -> None:
    """Asking for more than the tree holds frees everything unlocked and reports it."""
    cache = make_cache(device, window=2)
    fill(cache, [1, 2, 3])
    result = cache.evict(full_tokens=1000, swa_tokens=1000)
    assert (result.full_evicted, result.swa_evicted) == (3, 3)
    assert cache.evict(full_tokens=5).full_evicted == 0
    with pytest.raises(ValueError, match="negative"):
        cache.evict(full_tokens=-1)


def test_reset_returns_every_slot(device: str) -> None:
    """reset frees resident and tombstoned nodes' slots and records AllBlocksCleared."""
    s = tombstoned_prefix(device, page_size=2, window=2)
    cache = s.cache
    cache.take_events()
    cache.reset()
    assert [type(e).__name__ for e in cache.take_events()] == ["AllBlocksCleared"]
    assert cache.total_size() == (0, 0)
    assert cache.allocator.full_available_size() == cache.allocator.full_size
    assert cache.allocator.swa_available_size() == cache.allocator.swa_size
    cache.sanity_check(caller_held_full=0, caller_held_swa=0)
