"""Unit tests of insert and match_prefix: ownership, page alignment, splits and namespaces."""

from __future__ import annotations

import pytest
import torch

from tests.cache.helpers import fill, make_cache, serve

PAGE_SIZES = [1, 2, 4, 16]


@pytest.mark.parametrize("page_size", PAGE_SIZES)
def test_insert_then_match_returns_the_slots(device: str, page_size: int) -> None:
    """A key inserted with slots matches back to exactly those slots, cut to whole pages."""
    cache = make_cache(device, window=64, page_size=page_size)
    tokens = list(range(1, 3 * page_size + 1))
    slots = fill(cache, tokens)
    match = cache.match_prefix([*tokens, 99])
    assert torch.equal(match.indices, slots)
    assert match.last_node.token_ids == tuple(tokens)
    half = cache.match_prefix(tokens[: 2 * page_size - 1] if page_size > 1 else tokens[:1])
    assert half.indices.numel() == (page_size if page_size > 1 else 1)
    cache.sanity_check(caller_held_full=0, caller_held_swa=0)


@pytest.mark.parametrize("page_size", PAGE_SIZES)
def test_partial_trailing_page_is_ignored(device: str, page_size: int) -> None:
    """insert keeps only whole pages; the slots of a trailing partial page stay the caller's."""
    if page_size == 1:
        pytest.skip("page size 1 has no partial pages")
    cache = make_cache(device, window=64, page_size=page_size)
    fresh = cache.allocator.alloc(2 * page_size)
    assert fresh is not None
    tokens = list(range(1, 2 * page_size))  # one token short of two pages
    assert cache.insert(tokens, fresh[: len(tokens)]) == 0
    assert cache.total_size() == (page_size, page_size)
    cache.sanity_check(caller_held_full=page_size, caller_held_swa=page_size)


def test_duplicates_are_freed_and_prefix_reported(device: str) -> None:
    """Inserting cached tokens again frees the duplicate slots and reports the cached length."""
    cache = make_cache(device, window=4, full_size=32, swa_size=32)
    fill(cache, [1, 2, 3, 4])
    assert cache.allocator.full_available_size() == 28
    assert serve(cache, [1, 2, 3, 4, 5, 6]) == 4
    fresh = cache.allocator.alloc(6)
    assert fresh is not None
    assert cache.insert([1, 2, 3, 4, 5, 6], fresh) == 6
    assert cache.allocator.full_available_size() == 26
    assert cache.total_size() == (6, 6)
    cache.sanity_check(caller_held_full=0, caller_held_swa=0)


def test_prev_prefix_slots_are_not_freed(device: str) -> None:
    """Slots before prev_prefix_len are the tree's own and are never freed by insert."""
    cache = make_cache(device, window=4, full_size=32, swa_size=32)
    fill(cache, [1, 2, 3, 4])
    match = cache.match_prefix([1, 2, 3, 4, 5, 6])
    fresh = cache.allocator.alloc(2)
    assert fresh is not None
    value = torch.cat([match.indices, fresh])
    assert cache.insert([1, 2, 3, 4, 5, 6], value, prev_prefix_len=4) == 4
    assert cache.allocator.full_available_size() == 26
    assert torch.equal(cache.match_prefix([1, 2, 3, 4, 5, 6]).indices, value)
    cache.sanity_check(caller_held_full=0, caller_held_swa=0)


def test_match_splits_a_node_without_events(device: str) -> None:
    """A match ending inside a node splits it; the split emits no event and keeps the slots."""
    cache = make_cache(device, window=2)
    slots = fill(cache, [1, 2, 3, 4, 5, 6])
    cache.take_events()
    match = cache.match_prefix([1, 2, 3, 9])
    assert torch.equal(match.indices, slots[:3])
    assert match.last_node.token_ids == (1, 2, 3)
    assert [c.token_ids for c in match.last_node.children.values()] == [(4, 5, 6)]
    assert cache.take_events() == []
    assert torch.equal(cache.match_prefix([1, 2, 3, 4, 5, 6]).indices, slots)
    cache.sanity_check(caller_held_full=0, caller_held_swa=0)


@pytest.mark.parametrize("page_size", [2, 4])
def test_split_lands_on_page_boundaries(device: str, page_size: int) -> None:
    """A divergence inside a page splits the node at the page start."""
    cache = make_cache(device, window=1, page_size=page_size)
    tokens = list(range(1, 2 * page_size + 1))
    fill(cache, tokens)
    diverging = tokens[: page_size + 1] + [999] * (page_size - 1)
    match = cache.match_prefix(diverging)
    assert match.indices.numel() == page_size
    assert len(match.last_node.token_ids) == page_size
    cache.sanity_check(caller_held_full=0, caller_held_swa=0)


def test_namespaces_never_share(device: str) -> None:
    """The same tokens under different extra_keys are separate nodes with separate slots."""
    cache = make_cache(device, window=2, full_size=32, swa_size=32)
    plain = fill(cache, [1, 2, 3])
    salted = fill(cache, [1, 2, 3], extra_key="lora-7")
    assert torch.equal(cache.match_prefix([1, 2, 3]).indices, plain)
    assert torch.equal(cache.match_prefix([1, 2, 3], extra_key="lora-7").indices, salted)
    assert cache.match_prefix([1, 2, 3], extra_key="other").indices.numel() == 0
    assert cache.total_size() == (6, 6)
    cache.sanity_check(caller_held_full=0, caller_held_swa=0)


def test_bad_insert_arguments_raise(device: str) -> None:
    """Mismatched value length or a misaligned / uncached prev_prefix_len raise ValueError."""
    cache = make_cache(device, window=2, page_size=2, full_size=32, swa_size=32)
    fresh = cache.allocator.alloc(4)
    assert fresh is not None
    with pytest.raises(ValueError, match="slots for"):
        cache.insert([1, 2, 3, 4], fresh[:2])
    with pytest.raises(ValueError, match="page-aligned"):
        cache.insert([1, 2, 3, 4], fresh, prev_prefix_len=1)
    with pytest.raises(ValueError, match="cached"):
        cache.insert([1, 2, 3, 4], fresh, prev_prefix_len=2)
    assert cache.total_size() == (0, 0)
    cache.sanity_check(caller_held_full=4, caller_held_swa=4)


def test_tensor_keys_are_accepted(device: str) -> None:
    """Token ids may come as a tensor; they key the tree like a list."""
    cache = make_cache(device, window=2)
    slots = fill(cache, [5, 6, 7])
    match = cache.match_prefix(torch.tensor([5, 6, 7, 8]))
    assert torch.equal(match.indices, slots)


@pytest.mark.parametrize("bad", [[1, -1], [1, 2**32], [1, "x"]])
def test_bad_token_ids_are_rejected_before_any_change(device: str, bad: list[object]) -> None:
    """Ids outside [0, 2**32) or not ints raise ValueError and leave tree and pools untouched."""
    cache = make_cache(device, window=2, full_size=8, swa_size=8)
    fresh = cache.allocator.alloc(2)
    assert fresh is not None
    with pytest.raises(ValueError, match="token ids"):
        cache.insert(bad, fresh)  # type: ignore[arg-type]  # deliberately wrong
    assert cache.total_size() == (0, 0) and cache.take_events() == []
    cache.sanity_check(caller_held_full=2, caller_held_swa=2)


def test_value_of_the_wrong_kind_is_rejected(device: str) -> None:
    """A value tensor of another dtype or shape raises ValueError naming what was expected."""
    cache = make_cache(device, window=2, full_size=8, swa_size=8)
    with pytest.raises(ValueError, match="int64"):
        cache.insert([1, 2], torch.tensor([1, 2], dtype=torch.int32, device=device))
    with pytest.raises(ValueError, match="slots for"):
        cache.insert([1, 2], torch.tensor([[1, 2]], device=device))
