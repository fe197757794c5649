"""Unit tests of lock refs: full lock on the path, SWA lock capped to the window, misuse errors."""

from __future__ import annotations

import pytest

from cache import LockError
from tests.cache.helpers import fill, make_cache
from tests.cache.scenarios import tombstoned_prefix


@pytest.mark.parametrize(
    ("page_size", "window", "cap"), [(1, 3, 3), (2, 3, 4), (4, 4, 4), (4, 1, 4), (16, 5, 16)]
)
def test_swa_lock_covers_only_the_window(
    device: str, page_size: int, window: int, cap: int
) -> None:
    """Locking a long leaf protects all of it for full, only ceil(window/page) pages for SWA."""
    cache = make_cache(device, window=window, page_size=page_size)
    tokens = list(range(1, 4 * page_size + 1))
    fill(cache, tokens)
    match = cache.match_prefix(tokens)
    handle = cache.inc_lock_ref(match.last_node)
    assert handle.swa_locked_tokens == cap
    assert cache.full_protected_size() == len(tokens) and cache.full_evictable_size() == 0
    assert cache.swa_protected_size() == cap
    assert cache.swa_evictable_size() == len(tokens) - cap
    assert len(match.last_node.token_ids) == cap  # the leaf was split at the window boundary
    assert cache.match_prefix(tokens).indices.numel() == len(tokens)  # still the whole chain
    cache.sanity_check(caller_held_full=0, caller_held_swa=0)
    cache.dec_lock_ref(match.last_node, handle)
    assert cache.full_protected_size() == 0 and cache.swa_protected_size() == 0
    assert cache.full_evictable_size() == len(tokens) == cache.swa_evictable_size()
    cache.sanity_check(caller_held_full=0, caller_held_swa=0)


def test_short_path_is_swa_locked_whole(device: str) -> None:
    """A path shorter than the window is SWA-locked all the way to the root."""
    cache = make_cache(device, window=10)
    fill(cache, [1, 2, 3])
    match = cache.match_prefix([1, 2, 3])
    handle = cache.inc_lock_ref(match.last_node)
    assert handle.swa_locked_tokens == 3 and cache.swa_protected_size() == 3


def test_locked_nodes_survive_eviction(device: str) -> None:
    """Full eviction skips locked paths; SWA eviction tombstones only beyond the SWA lock."""
    cache = make_cache(device, window=2)
    fill(cache, [1, 2, 3, 4, 5, 6])
    match = cache.match_prefix([1, 2, 3, 4, 5, 6])
    handle = cache.inc_lock_ref(match.last_node)
    result = cache.evict(full_tokens=100, swa_tokens=100)
    assert result.full_evicted == 0 and result.swa_evicted == 4  # [1..4] tombstoned
    assert cache.total_size() == (6, 2)
    cache.sanity_check(caller_held_full=0, caller_held_swa=0)
    cache.dec_lock_ref(match.last_node, handle)
    result = cache.evict(full_tokens=1)
    assert result.full_evicted == 6 and result.swa_evicted == 2  # leaf, then its tombstone
    assert cache.total_size() == (0, 0)
    cache.sanity_check(caller_held_full=0, caller_held_swa=0)


def test_lock_right_after_a_tombstone(device: str) -> None:
    """A lock on X just below tombstone P pins X's SWA and P's full KV; release frees both."""
    s = tombstoned_prefix(device, page_size=1, window=3, x_pages=3)
    cache = s.cache
    match = cache.match_prefix(s.px)
    assert match.indices.numel() == len(s.px)
    handle = cache.inc_lock_ref(match.last_node)
    assert cache.full_protected_size() == len(s.px) and cache.swa_protected_size() == 3
    assert cache.evict(full_tokens=50, swa_tokens=50).full_evicted == 0
    cache.sanity_check(caller_held_full=0, caller_held_swa=0)
    cache.dec_lock_ref(match.last_node, handle)
    cache.take_events()
    assert cache.evict(full_tokens=1).full_evicted == len(s.px)
    assert [type(e).__name__ for e in cache.take_events()] == ["BlockRemoved", "BlockRemoved"]


def test_lock_reaching_a_tombstone_is_refused(device: str) -> None:
    """Locking a node whose SWA window would cover a tombstone raises before changing anything."""
    s = tombstoned_prefix(device, page_size=1, window=8, x_pages=3)
    (p,) = s.cache.root.children.values()
    (x,) = p.children.values()
    with pytest.raises(LockError, match="tombstone"):
        s.cache.inc_lock_ref(x)
    assert s.cache.full_protected_size() == 0 and s.cache.swa_protected_size() == 0
    s.cache.sanity_check(caller_held_full=0, caller_held_swa=0)


def test_wrong_or_stale_handles_raise(device: str) -> None:
    """dec_lock_ref refuses a handle for another node, a double release, and pre-reset handles."""
    cache = make_cache(device, window=2)
    fill(cache, [1, 2, 3])
    fill(cache, [1, 2, 4])
    a = cache.match_prefix([1, 2, 3]).last_node
    b = cache.match_prefix([1, 2, 4]).last_node
    handle = cache.inc_lock_ref(a)
    with pytest.raises(LockError, match="taken on"):
        cache.dec_lock_ref(b, handle)
    cache.dec_lock_ref(a, handle)
    with pytest.raises(LockError, match="no lock"):
        cache.dec_lock_ref(a, handle)
    handle = cache.inc_lock_ref(a)
    cache.reset()
    with pytest.raises(LockError, match="reset"):
        cache.dec_lock_ref(a, handle)
    cache.sanity_check(caller_held_full=0, caller_held_swa=0)


def test_locking_the_root_is_a_no_op(device: str) -> None:
    """An empty match's node (a root) can be locked and released with no effect."""
    cache = make_cache(device, window=2)
    match = cache.match_prefix([1, 2])
    handle = cache.inc_lock_ref(match.last_node)
    assert handle.swa_locked_tokens == 0
    cache.dec_lock_ref(match.last_node, handle)
    cache.sanity_check(caller_held_full=0, caller_held_swa=0)
