"""Unit tests of the events the tree records, the state digest and snapshot events."""

from __future__ import annotations

import pytest
import torch

from cache import SWARadixCache
from cache.events import (
    REMOVED_EVICTED,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    BlockSWAEvicted,
    block_hashes_of,
    chain_page_digests,
    digest_to_block_hash,
    namespace_prior,
    page_digest,
)
from swa_es.testing import BlockModel
from tests.cache.helpers import fill, make_cache, serve

H1, H2 = 7470307888890966271, -1634645291211865391
H1234 = -3488128144981237669


def test_vectors_page_one(device: str) -> None:
    """Pages [1], [2] chained from the root hash to the sglang-compatible vectors."""
    cache = make_cache(device, window=1)
    fill(cache, [1, 2])
    assert cache.take_events() == [
        BlockStored((H1,), None, (1,), 1),
        BlockStored((H2,), H1, (2,), 1),
    ]


def test_vector_page_four(device: str) -> None:
    """The page [1, 2, 3, 4] at the root hashes to the known vector."""
    cache = make_cache(device, window=4, page_size=4)
    fill(cache, [1, 2, 3, 4])
    assert cache.take_events() == [BlockStored((H1234,), None, (1, 2, 3, 4), 4)]


def test_constructor_and_reset_record_all_cleared(device: str) -> None:
    """A new tree's first event is AllBlocksCleared, and reset records another."""
    from cache import SWAKVAllocator, SWARadixCache

    cache = SWARadixCache(SWAKVAllocator(8, 8, 1, device), 2)
    assert cache.take_events() == [AllBlocksCleared()]
    fill(cache, [1])
    cache.reset()
    assert cache.take_events()[-1] == AllBlocksCleared()


@pytest.mark.parametrize("page_size", [1, 2, 4, 16])
def test_one_stored_event_per_page_chained(device: str, page_size: int) -> None:
    """Each page gets one BlockStored whose parent is the previous page's hash."""
    cache = make_cache(device, window=1, page_size=page_size)
    tokens = list(range(1, 3 * page_size + 1))
    fill(cache, tokens)
    events = cache.take_events()
    assert all(isinstance(e, BlockStored) for e in events)
    stored = [e for e in events if isinstance(e, BlockStored)]
    expected = block_hashes_of(chain_page_digests(b"", tokens, page_size))
    assert [e.block_hashes for e in stored] == [(h,) for h in expected]
    assert [e.parent_block_hash for e in stored] == [None, *expected[:-1]]
    assert all(e.block_size == page_size for e in stored)


def test_split_children_chain_to_the_right_parent(device: str) -> None:
    """A branch inserted after a split chains onto the split prefix's last page; no split event."""
    cache = make_cache(device, window=1)
    fill(cache, [1, 2, 3, 4])
    cache.take_events()
    serve(cache, [1, 2, 9])
    (stored,) = cache.take_events()
    assert stored == BlockStored(
        (digest_to_block_hash(page_digest(chain_page_digests(b"", [1, 2], 1)[-1], [9])),),
        H2,
        (9,),
        1,
    )


def test_removal_after_split_carries_each_parts_pages(device: str) -> None:
    """Removing the two halves of a split node names exactly each half's page hashes."""
    cache = make_cache(device, window=8)
    fill(cache, [1, 2, 3, 4])
    cache.match_prefix([1, 2, 7])  # splits [1,2,3,4] into [1,2] + [3,4]
    cache.take_events()
    cache.evict(full_tokens=4)
    hashes = block_hashes_of(chain_page_digests(b"", [1, 2, 3, 4], 1))
    assert cache.take_events() == [
        BlockRemoved(tuple(hashes[2:]), reason=REMOVED_EVICTED),
        BlockRemoved(tuple(hashes[:2]), reason=REMOVED_EVICTED),
    ]


def test_namespace_root_hash_is_salted(device: str) -> None:
    """Under an extra_key the first page chains from sha256(extra_key), parent still None."""
    cache = make_cache(device, window=1)
    fill(cache, [1], extra_key="salt")
    (event,) = cache.take_events()
    assert event == BlockStored(
        (digest_to_block_hash(page_digest(namespace_prior("salt"), [1])),), None, (1,), 1
    )
    assert event.block_hashes != (H1,)


def test_swa_events_and_digest_follow_residency(device: str) -> None:
    """Tombstoning and restoring record SWA events; a replica's digest tracks the tree's."""
    cache = make_cache(device, window=4)
    reference = BlockModel()
    fill(cache, [1, 2, 3, 4, 5])
    fill(cache, [1, 2, 3, 4, 6])
    cache.match_prefix([1, 2, 3, 4, 5])
    cache.evict(swa_tokens=2)
    events = cache.take_events()
    assert [type(e) for e in events][-2:] == [BlockRemoved, BlockSWAEvicted]
    reference.apply_all(events)
    assert reference.hexdigest() == cache.state_digest()
    serve(cache, [1, 2, 3, 4, 5])  # match stops before the tombstone: insert restores it
    events = cache.take_events()
    assert [type(e).__name__ for e in events] == ["BlockSWARestored"]
    reference.apply_all(events)
    assert reference.hexdigest() == cache.state_digest()
    cache.sanity_check(caller_held_full=0, caller_held_swa=0)


def _busy_tree(cache: SWARadixCache) -> None:
    """Branches, a second namespace and tombstones ([3,4] pages end up tombstoned)."""
    ps = cache.page_size
    serve(cache, [1] * ps + [2] * ps + [5] * ps, extra_key="ns")
    for pages in ([1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 7, 8], [1, 2, 9, 9]):
        serve(cache, [t for t in pages for _ in range(ps)])
    cache.match_prefix([t for t in (1, 2, 3, 4, 5, 6) for _ in range(ps)])
    cache.match_prefix([t for t in (1, 2, 9, 9) for _ in range(ps)])
    for _ in range(4):  # old leaves are deleted first, then an internal node is tombstoned
        cache.evict(swa_tokens=1)
        if any(isinstance(e, BlockSWAEvicted) for e in cache.snapshot_events()):
            return
    raise AssertionError("the busy tree got no tombstone")


@pytest.mark.parametrize("page_size", [1, 2])
def test_snapshot_events_rebuild_the_same_digest(device: str, page_size: int) -> None:
    """AllBlocksCleared + snapshot_events() applied to an empty replica gives state_digest()."""
    cache = make_cache(device, window=2, page_size=page_size)
    _busy_tree(cache)
    snapshot = cache.snapshot_events()
    assert any(isinstance(e, BlockSWAEvicted) for e in snapshot)
    reference = BlockModel()
    reference.apply_all([AllBlocksCleared(), *snapshot])
    assert reference.hexdigest() == cache.state_digest()
    live = BlockModel()
    live.apply_all(cache.take_events())
    assert live.blocks == reference.blocks


def test_events_off_records_nothing_but_digests_alike(device: str) -> None:
    """With events off nothing is recorded, yet digest and snapshot equal the events-on tree."""
    on = make_cache(device, window=2)
    off = make_cache(device, window=2, events=False)
    _busy_tree(on)
    _busy_tree(off)
    assert off.take_events() == []
    assert off.event_recorder is None  # the null sink: no recorder, nothing hashed
    assert off.state_digest() == on.state_digest()
    assert off.snapshot_events() == on.snapshot_events()
    off.sanity_check(caller_held_full=0, caller_held_swa=0)


def test_match_indices_live_on_the_device(device: str) -> None:
    """Match results are int64 tensors on the cache's device."""
    cache = make_cache(device, window=1)
    fill(cache, [1, 2])
    indices = cache.match_prefix([1, 2]).indices
    assert indices.device.type == device and indices.dtype == torch.int64
    assert cache.device.type == device
