"""Unit tests of LRU recency as sglang 0.5.16 keeps it: splits, insert walks, the lock's split."""

from __future__ import annotations

from cache.events import BlockRemoved, BlockSWAEvicted
from tests.cache.helpers import fill, make_cache


def test_a_match_split_makes_both_halves_most_recent(device: str) -> None:
    """A match that splits A into prefix and suffix leaves both more recent than leaf B.

    sglang moves the prefix, then the suffix, to the most recent end of both lists; so a full
    eviction takes B (untouched since its insert), not A's suffix.
    """
    cache = make_cache(device, window=1)
    fill(cache, [1, 2, 3, 4])
    fill(cache, [9, 9])
    assert cache.match_prefix([1, 2, 5]).indices.numel() == 2  # splits [1,2,3,4] at 2
    assert cache.evict(full_tokens=1).full_evicted == 2
    assert cache.match_prefix([9, 9]).indices.numel() == 0
    assert cache.match_prefix([1, 2, 3, 4]).indices.numel() == 4
    cache.sanity_check(caller_held_full=0, caller_held_swa=0)


def test_an_insert_split_makes_both_halves_most_recent(device: str) -> None:
    """An insert that splits A (key diverging inside it) also leaves both halves most recent."""
    cache = make_cache(device, window=1)
    fill(cache, [1, 2, 3, 4])
    fill(cache, [9, 9])
    fill(cache, [1, 2, 7, 7])  # splits [1,2,3,4] into [1,2] → {[3,4], [7,7]}
    assert cache.evict(full_tokens=2).full_evicted == 2
    assert cache.match_prefix([9, 9]).indices.numel() == 0
    assert cache.match_prefix([1, 2, 3, 4]).indices.numel() == 4
    assert cache.match_prefix([1, 2, 7, 7]).indices.numel() == 4


def test_an_insert_split_puts_the_suffix_before_the_prefix(device: str) -> None:
    """After an insert split, SWA recency is new leaf, suffix, prefix: SWA eviction tombstones
    the prefix (internal) first and deletes nothing."""
    cache = make_cache(device, window=1)
    fill(cache, [1, 2, 3, 4])
    fill(cache, [1, 2, 7, 7])
    cache.take_events()
    result = cache.evict(swa_tokens=1)
    assert (result.full_evicted, result.swa_evicted) == (0, 2)
    (event,) = cache.take_events()
    assert isinstance(event, BlockSWAEvicted) and len(event.block_hashes) == 2
    assert cache.root.children[1].swa_tombstone
    cache.sanity_check(caller_held_full=0, caller_held_swa=0)


def test_an_insert_walk_makes_deeper_nodes_more_recent(device: str) -> None:
    """Insert refreshes each node it walks as it reaches it: the path's deepest node ends most
    recent, the one nearest the root least, so SWA eviction tombstones near the root first."""
    cache = make_cache(device, window=1)
    fill(cache, [1, 2])
    fill(cache, [1, 2, 3, 4])
    fill(cache, [5, 5])  # newer than the whole [1,2] → [3,4] path
    fill(cache, [1, 2, 3, 4])  # walks [1,2] then [3,4]: [3,4] newest, then [1,2], then [5,5]
    cache.take_events()
    assert cache.evict(swa_tokens=3).swa_evicted == 4  # [5,5] deleted, then [1,2] tombstoned
    assert [type(e) for e in cache.take_events()] == [BlockRemoved, BlockSWAEvicted]
    assert cache.root.children[1].swa_tombstone
    assert not cache.root.children[1].children[3].swa_tombstone


def test_the_window_lock_split_keeps_recency(device: str) -> None:
    """The window-capped lock's own split (which sglang never makes) leaves both halves where
    the node was, so it changes no eviction order."""
    cache = make_cache(device, window=2)
    fill(cache, [1, 2, 3, 4])
    fill(cache, [9, 9])
    node = cache.match_prefix([1, 2, 3, 4]).last_node  # [1,2,3,4] newer than [9,9]
    fill(cache, [8, 8])  # the newest
    handle = cache.inc_lock_ref(node)  # splits [1,2,3,4] at 2, in place
    assert node.token_ids == (3, 4)
    cache.dec_lock_ref(node, handle)
    # Leaves, least recent first: [9,9], [3,4], [8,8].
    assert cache.evict(full_tokens=4).full_evicted == 4
    assert cache.match_prefix([8, 8]).indices.numel() == 2
    assert cache.match_prefix([1, 2, 3, 4]).indices.numel() == 2
    cache.sanity_check(caller_held_full=0, caller_held_swa=0)
