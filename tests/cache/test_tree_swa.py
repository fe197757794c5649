"""Unit tests of the sliding-window rules: tombstones, the match rule, restores on insert."""

from __future__ import annotations

import pytest
import torch

from cache.events import BlockSWAEvicted
from tests.cache.helpers import serve
from tests.cache.scenarios import tombstoned_prefix

# (page size, window): windows smaller than, equal to and not aligned with the page.
WINDOWS = [(1, 1), (1, 3), (2, 1), (2, 2), (2, 3), (4, 3), (4, 4), (4, 6), (16, 5), (16, 16)]


@pytest.mark.parametrize(("page_size", "window"), WINDOWS)
def test_swa_eviction_tombstones_the_oldest_internal_node(
    device: str, page_size: int, window: int
) -> None:
    """After Y is deleted, the least recent node P (internal) loses its SWA but keeps full KV."""
    s = tombstoned_prefix(device, page_size=page_size, window=window)
    (prefix,) = s.cache.root.children.values()
    assert prefix.token_ids == tuple(s.p) and prefix.swa_tombstone
    assert [c.swa_tombstone for c in prefix.children.values()] == [False]
    full, swa = s.cache.total_size()
    assert full == len(s.px) and swa == len(s.px) - len(s.p)
    s.cache.sanity_check(caller_held_full=0, caller_held_swa=0)


@pytest.mark.parametrize(("page_size", "window"), WINDOWS)
@pytest.mark.parametrize("x_pages", [1, 2, 3, 5])
def test_match_needs_a_window_after_the_last_tombstone(
    device: str, page_size: int, window: int, x_pages: int
) -> None:
    """A match through a tombstone ends past it only if ≥ window resident tokens follow it."""
    s = tombstoned_prefix(device, page_size=page_size, window=window, x_pages=x_pages)
    match = s.cache.match_prefix(s.px)
    expected = len(s.px) if x_pages * page_size >= window else 0
    assert match.indices.numel() == expected
    assert not match.last_node.swa_tombstone


def test_match_without_tombstones_accepts_short_prefixes(device: str) -> None:
    """With no tombstone on the path, a prefix shorter than the window still matches."""
    s = tombstoned_prefix(device, page_size=1, window=8)
    serve(s.cache, [7, 7])
    assert s.cache.match_prefix([7, 7, 7]).indices.numel() == 2


@pytest.mark.parametrize("page_size", [1, 2, 4, 16])
def test_insert_restores_a_tombstone_from_fresh_slots(device: str, page_size: int) -> None:
    """Serving P+X when the match stops before P gives P its SWA back from the new slots."""
    s = tombstoned_prefix(device, page_size=page_size, window=4 * page_size, x_pages=1)
    cache = s.cache
    assert cache.match_prefix(s.px).indices.numel() == 0
    cache.take_events()
    before = cache.allocator.swa_available_size()
    assert serve(cache, s.px) == len(s.px)
    events = cache.take_events()
    assert [type(e).__name__ for e in events] == ["BlockSWARestored"]
    assert len(events[0].block_hashes) == 2  # type: ignore[union-attr]  # a BlockSWARestored
    assert cache.allocator.swa_available_size() == before - len(s.p)
    assert cache.match_prefix(s.px).indices.numel() == len(s.px)
    node = cache.match_prefix(s.p).last_node
    assert not node.swa_tombstone
    assert bool((cache.allocator.translate_full_to_swa(node.value) != 0).all())
    cache.sanity_check(caller_held_full=0, caller_held_swa=0)


def test_restore_keeps_the_nodes_full_slots(device: str) -> None:
    """A restore keeps the tombstone's full slots (callers may hold them) and frees the new ones."""
    s = tombstoned_prefix(device, page_size=1, window=4, x_pages=1)
    cache = s.cache
    (old,) = cache.root.children.values()
    assert old.swa_tombstone
    full_before = old.value.clone()
    free_full = cache.allocator.full_available_size()
    serve(cache, s.px)
    assert torch.equal(cache.match_prefix(s.p).indices, full_before)
    assert cache.allocator.full_available_size() == free_full


def test_tombstoning_emits_swa_evicted_with_the_nodes_pages(device: str) -> None:
    """Tombstoning P records one BlockSWAEvicted carrying both of P's page hashes."""
    s = tombstoned_prefix(device, page_size=2, window=2)
    stored = [e for e in s.cache.snapshot_events() if isinstance(e, BlockSWAEvicted)]
    assert len(stored) == 1 and len(stored[0].block_hashes) == 2
