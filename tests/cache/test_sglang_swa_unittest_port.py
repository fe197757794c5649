"""sglang's own SWA unit tests, ported to our API.

Source: ``test/registered/unit/mem_cache/test_swa_unittest.py`` in sgl-project/sglang (the
version with the event tests, commit 00b26b25, plus ``test_swa_memory_pool`` from the older
736432bf). Each test's docstring names the sglang test it comes from. sglang builds its pools
as ``SWAKVPool`` + ``SWATokenToKVPoolAllocator``; ours is one ``SWAKVAllocator`` of the same
sizes (slot 0 reserved, slots 1..N handed out). sglang's ``tree.insert(key, value)`` without a
match is our ``fill``; its ``evict(EvictParams(num_tokens, swa_num_tokens))`` is our
``evict(full_tokens, swa_tokens)``.

Not ported, because our API does not offer what they test (see tests/differential/intended.py):

* ``test_swa_tail_mapping_uses_real_endpoint_and_clears_padding``: ``alloc_extend_swa_tail``,
  the disaggregated-decode pre-allocation;
* ``test_swa_radix_cache_eagle``: EAGLE bigram keys (``is_eagle=True``);
* ``test_swa_cache_finished_req_eagle_uses_cache_protected_len_and_bigram_key``: the scheduler's
  ``cache_finished_req`` with a ``Req`` and bigram keys.

``TestSWASplitLeafOnInsert`` tests sglang's ``SGLANG_OPT_SWA_SPLIT_LEAF_ON_INSERT``, which caps
a fresh leaf's SWA protection at the page-rounded window by splitting at insert. Our lock is
capped that way always (split at lock time), so its flag-on cases port as they are, checked
after ``inc_lock_ref``; its flag-off case is an intended difference and asserts our cap.
"""

from __future__ import annotations

from collections import Counter

import pytest

from cache import LockHandle, SWAKVAllocator, SWARadixCache
from cache.events import BlockRemoved, BlockStored
from cache.tree.node import TreeNode
from tests.cache.helpers import fill, make_cache


def _tail(window: int, page_size: int) -> int:
    """The page-rounded window (sglang's ``_expected_tail_size``)."""
    return -(-window // page_size) * page_size


def _stored(cache: SWARadixCache) -> list[BlockStored]:
    return [e for e in cache.take_events() if isinstance(e, BlockStored)]


def test_swa_memory_pool(device: str) -> None:
    """From sglang's ``TestSWA.test_swa_memory_pool`` (736432bf).

    One slot takes one from each pool; ``free_swa`` gives the SWA one back and its full slot
    then maps to no SWA slot.
    """
    alloc = SWAKVAllocator(16, 16, 1, device)
    assert alloc.full_available_size() + alloc.swa_available_size() == 32
    index = alloc.alloc(1)
    assert index is not None
    assert alloc.full_available_size() + alloc.swa_available_size() == 30
    alloc.free_swa(index)
    assert alloc.translate_full_to_swa(index).tolist() == [0]
    assert alloc.swa_available_size() == 16 and alloc.full_available_size() == 15


def test_swa_radix_cache_kv_events(device: str) -> None:
    """From sglang's ``TestSWA.test_swa_radix_cache_kv_events``.

    Stores are one event per page; SWA-only eviction removes no block; a full eviction then
    removes every stored block (the leaf, and the tombstone it leaves childless).
    """
    cache = make_cache(device, window=4, full_size=64, swa_size=32)
    fill(cache, [1, 2, 3, 4])
    first = _stored(cache)
    assert [e.token_ids[0] for e in first] == [1, 2, 3, 4]
    fill(cache, [1, 2, 3, 4, 5, 6])
    second = _stored(cache)
    assert [e.token_ids[0] for e in second] == [5, 6]
    stored = [e.block_hashes[0] for e in first + second]

    result = cache.evict(full_tokens=0, swa_tokens=1)
    assert result.full_evicted == 0 and result.swa_evicted >= 1
    assert [e for e in cache.take_events() if isinstance(e, BlockRemoved)] == []

    result = cache.evict(full_tokens=1, swa_tokens=0)
    assert result.full_evicted >= 1
    removed = [
        h for e in cache.take_events() if isinstance(e, BlockRemoved) for h in e.block_hashes
    ]
    assert Counter(removed) == Counter(stored)


def test_swa_radix_cache_kv_events_split_hash(device: str) -> None:
    """From sglang's ``TestSWA.test_swa_radix_cache_kv_events_split_hash``.

    A key that diverges inside a node chains its first new block to the page before the split.
    """
    cache = make_cache(device, window=4, full_size=64, swa_size=32)
    fill(cache, [1, 2, 3, 4])
    first = _stored(cache)
    assert len(first) == 4
    split_parent = first[1].block_hashes[0]
    fill(cache, [1, 2, 5, 6])
    second = _stored(cache)
    assert len(second) == 2
    assert list(second[0].token_ids) == [5]
    assert second[0].parent_block_hash == split_parent


def test_swa_memory_pool_paged_free_clears_full_page_mapping(device: str) -> None:
    """From sglang's ``TestSWA.test_swa_memory_pool_paged_free_clears_full_page_mapping``.

    ``free_swa`` of one slot frees its page's SWA whole and clears the whole page's mapping; a
    second slot of the same page then frees nothing more.
    """
    page_size = 4
    alloc = SWAKVAllocator(16, 16, page_size, device)
    full = alloc.alloc(page_size)
    assert full is not None
    assert alloc.swa_available_size() == 16 - page_size
    alloc.free_swa(full[:1])
    assert alloc.swa_available_size() == 16
    assert not bool(alloc.translate_full_to_swa(full).any())
    alloc.free_swa(full[1:2])
    assert alloc.swa_available_size() == 16


def test_swa_radix_cache_1(device: str) -> None:
    """From sglang's ``TestSWA.test_swa_radix_cache_1``.

    Four inserts, three evictions (full 1; SWA 1; full 1 + SWA 2), then a match that the
    tombstoned prefix cuts to nothing and one whose last node holds [60, 70].
    """
    cache = make_cache(device, window=4, full_size=128, swa_size=64)
    for tokens in ([1, 2, 3], [1, 2, 3, 4, 5, 6, 7], [10, 11, 12], [1, 2, 3, 4, 5, 60, 70]):
        fill(cache, tokens)
    cache.evict(full_tokens=1, swa_tokens=0)
    cache.evict(full_tokens=0, swa_tokens=1)
    cache.evict(full_tokens=1, swa_tokens=2)

    assert cache.match_prefix([1, 2, 3, 4, 5]).indices.numel() == 0
    match = cache.match_prefix([1, 2, 3, 4, 5, 60, 70])
    assert match.indices.numel() == 7
    assert match.last_node.token_ids == (60, 70)
    cache.sanity_check(caller_held_full=0, caller_held_swa=0)


def _insert_and_lock(
    device: str, *, window: int, page_size: int, leaf_len: int
) -> tuple[SWARadixCache, TreeNode, LockHandle]:
    """sglang's ``TestSWASplitLeafOnInsert._insert_and_lock``: insert, match back, lock."""
    cache = make_cache(device, window=window, page_size=page_size, full_size=128, swa_size=64)
    tokens = list(range(leaf_len))
    fill(cache, tokens)
    leaf = cache.match_prefix(tokens).last_node
    handle = cache.inc_lock_ref(leaf)
    return cache, leaf, handle


def test_flag_off_protects_full_leaf(device: str) -> None:
    """From sglang's ``TestSWASplitLeafOnInsert.test_flag_off_protects_full_leaf``.

    Intended difference: sglang (flag off) SWA-protects the whole 12-token leaf; our lock
    protects only the window's 4 tokens, splitting the leaf (full protection is unchanged).
    """
    cache, leaf, _ = _insert_and_lock(device, window=4, page_size=1, leaf_len=12)
    assert len(leaf.value) == 4
    assert cache.swa_protected_size() == 4
    assert cache.full_protected_size() == 12


@pytest.mark.parametrize(
    ("window", "page_size", "leaf_len", "expected_tail"),
    [
        (4, 1, 12, 4),
        (4, 1, 5, 4),
        (1, 1, 5, 1),
        (4, 2, 12, 4),
        (8, 2, 12, 8),
        (4, 4, 12, 4),
        (3, 2, 12, 4),
        (5, 4, 12, 8),
        (3, 4, 12, 4),
    ],
)
def test_flag_on_caps_protection_at_window(
    device: str, window: int, page_size: int, leaf_len: int, expected_tail: int
) -> None:
    """From sglang's ``TestSWASplitLeafOnInsert.test_flag_on_caps_protection_at_window``.

    The locked leaf is cut to the page-rounded window and only that is SWA-protected.
    """
    assert _tail(window, page_size) == expected_tail
    cache, leaf, _ = _insert_and_lock(device, window=window, page_size=page_size, leaf_len=leaf_len)
    assert len(leaf.value) == expected_tail
    assert cache.swa_protected_size() == expected_tail


@pytest.mark.parametrize(
    ("window", "page_size", "leaf_len"),
    [(4, 1, 4), (4, 1, 3), (4, 2, 4), (3, 2, 4), (8, 2, 4), (4, 4, 4)],
)
def test_flag_on_no_split_when_leaf_within_window(
    device: str, window: int, page_size: int, leaf_len: int
) -> None:
    """From sglang's ``TestSWASplitLeafOnInsert.test_flag_on_no_split_when_leaf_within_window``.

    A leaf no longer than the page-rounded window is not split and is protected whole.
    """
    cache, leaf, _ = _insert_and_lock(device, window=window, page_size=page_size, leaf_len=leaf_len)
    assert len(leaf.value) == leaf_len
    assert cache.swa_protected_size() == leaf_len


def test_match_prefix_returns_full_chain_after_split(device: str) -> None:
    """From sglang's ``TestSWASplitLeafOnInsert.test_match_prefix_returns_full_chain_after_split``.

    After the window split, a match still returns all 12 slots and ends at the split leaf.
    """
    cache, leaf, _ = _insert_and_lock(device, window=4, page_size=1, leaf_len=12)
    assert len(leaf.value) == 4
    match = cache.match_prefix(list(range(12)))
    assert match.indices.shape[0] == 12
    assert match.last_node is leaf


def test_dec_lock_ref_after_split_balances_to_zero(device: str) -> None:
    """From sglang's ``TestSWASplitLeafOnInsert.test_dec_lock_ref_after_split_balances_to_zero``.

    Unlocking the split leaf releases exactly what the lock protected.
    """
    cache, leaf, handle = _insert_and_lock(device, window=4, page_size=1, leaf_len=12)
    assert cache.swa_protected_size() == 4
    assert cache.full_protected_size() == 12
    cache.dec_lock_ref(leaf, handle)
    assert cache.swa_protected_size() == 0
    assert cache.full_protected_size() == 0
    cache.sanity_check(caller_held_full=0, caller_held_swa=0)
