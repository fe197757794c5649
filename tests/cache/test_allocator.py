"""Unit tests of SWAKVAllocator: paged hand-out, mapping, freeing and exact accounting."""

from __future__ import annotations

import pytest
import torch

from cache import SWAKVAllocator


def test_hands_out_slots_one_to_n(device: str) -> None:
    """A pool of N slots at page size 1 hands out exactly 1..N, each with a distinct SWA slot."""
    alloc = SWAKVAllocator(8, 8, 1, device)
    slots = alloc.alloc(8)
    assert slots is not None and slots.device.type == device and slots.dtype == torch.int64
    assert sorted(slots.tolist()) == list(range(1, 9))
    swa = alloc.translate_full_to_swa(slots)
    assert sorted(swa.tolist()) == list(range(1, 9))
    assert alloc.alloc(1) is None
    assert alloc.full_available_size() == 0 and alloc.swa_available_size() == 0


@pytest.mark.parametrize("page_size", [2, 4, 16])
def test_pages_are_whole_and_page_zero_reserved(device: str, page_size: int) -> None:
    """Paged allocation returns whole pages, never page 0, mapped page to page."""
    alloc = SWAKVAllocator(4 * page_size, 2 * page_size, page_size, device)
    slots = alloc.alloc(2 * page_size)
    assert slots is not None
    pages = slots.view(-1, page_size)
    offsets = torch.arange(page_size, device=device).expand_as(pages)
    assert torch.equal(pages - pages[:, :1], offsets)
    assert bool((pages[:, 0] % page_size == 0).all()) and int(slots.min()) >= page_size
    swa = alloc.translate_full_to_swa(slots).view(-1, page_size)
    assert bool((swa[:, 0] % page_size == 0).all())
    assert torch.equal(swa - swa[:, :1], pages - pages[:, :1])
    with pytest.raises(ValueError, match="multiple of page_size"):
        alloc.alloc(page_size + 1)
    alloc.sanity_check()


def test_none_when_either_pool_is_short(device: str) -> None:
    """alloc fails (None, nothing taken) when the SWA pool lacks room even if full has it."""
    alloc = SWAKVAllocator(8, 3, 1, device)
    assert alloc.alloc(4) is None
    assert alloc.full_available_size() == 8 and alloc.swa_available_size() == 3
    assert alloc.alloc(3) is not None
    assert alloc.full_available_size() == 5 and alloc.swa_available_size() == 0


def test_free_returns_both_pools(device: str) -> None:
    """free gives back the full slots and the SWA slots mapped to them."""
    alloc = SWAKVAllocator(8, 8, 2, device)
    slots = alloc.alloc(6)
    assert slots is not None
    alloc.free(slots)
    assert alloc.full_available_size() == 8 and alloc.swa_available_size() == 8
    assert not bool(alloc.translate_full_to_swa(slots).any())
    alloc.sanity_check()


def test_free_swa_keeps_full_and_is_idempotent(device: str) -> None:
    """free_swa frees only SWA, clears the mapping; again is a no-op; free then frees full only."""
    alloc = SWAKVAllocator(8, 8, 2, device)
    slots = alloc.alloc(4)
    assert slots is not None
    alloc.free_swa(slots[:2])
    assert alloc.full_available_size() == 4 and alloc.swa_available_size() == 6
    assert alloc.translate_full_to_swa(slots[:2]).tolist() == [0, 0]
    alloc.free_swa(slots[:2])
    assert alloc.swa_available_size() == 6
    alloc.free(slots)
    assert alloc.full_available_size() == 8 and alloc.swa_available_size() == 8
    alloc.sanity_check()


def test_freed_slots_are_reused(device: str) -> None:
    """Freed pages come back from later allocations; accounting stays exact across cycles."""
    alloc = SWAKVAllocator(4, 4, 1, device)
    for _ in range(5):
        slots = alloc.alloc(4)
        assert slots is not None and sorted(slots.tolist()) == [1, 2, 3, 4]
        alloc.free(slots)
    alloc.sanity_check()


def test_move_swa_restores_a_tombstone(device: str) -> None:
    """move_swa hands fresh SWA slots to full slots whose SWA was freed, and frees the source."""
    alloc = SWAKVAllocator(8, 8, 1, device)
    kept = alloc.alloc(2)
    assert kept is not None
    alloc.free_swa(kept)
    fresh = alloc.alloc(2)
    assert fresh is not None
    swa = alloc.translate_full_to_swa(fresh)
    alloc.move_swa(kept, fresh)
    assert torch.equal(alloc.translate_full_to_swa(kept), swa)
    assert alloc.full_available_size() == 6 and alloc.swa_available_size() == 6
    alloc.sanity_check()


def test_bad_input_is_rejected(device: str) -> None:
    """Negative or misaligned requests and pool sizes raise ValueError naming the problem."""
    with pytest.raises(ValueError, match="full_size"):
        SWAKVAllocator(5, 4, 2, device)
    alloc = SWAKVAllocator(8, 8, 4, device)
    with pytest.raises(ValueError, match="non-negative"):
        alloc.alloc(-4)
    with pytest.raises(ValueError, match="whole number of pages"):
        alloc.free(torch.tensor([4, 5], device=device), whole_pages=True)
    with pytest.raises(ValueError, match="1-D"):
        alloc.free(torch.tensor([[4, 5]], device=device))


@pytest.mark.parametrize("page_size", [2, 4, 16])
def test_free_swa_of_part_of_a_page_frees_the_page(device: str, page_size: int) -> None:
    """free_swa given one slot of a page frees that page's SWA whole; the rest is then a no-op.

    sglang's paged allocator widens to whole pages (docs/design.md §3: a page is freed as a whole).
    """
    alloc = SWAKVAllocator(4 * page_size, 4 * page_size, page_size, device)
    slots = alloc.alloc(2 * page_size)
    assert slots is not None
    alloc.free_swa(slots[1:2])
    assert alloc.swa_available_size() == 3 * page_size
    assert alloc.full_available_size() == 2 * page_size
    assert not bool(alloc.translate_full_to_swa(slots[:page_size]).any())
    assert bool(alloc.translate_full_to_swa(slots[page_size:]).all())
    alloc.free_swa(slots[0:1])
    assert alloc.swa_available_size() == 3 * page_size
    alloc.sanity_check()


@pytest.mark.parametrize("page_size", [2, 4])
def test_free_of_part_of_a_page_frees_each_page_once(device: str, page_size: int) -> None:
    """free of a page's tail (an unaligned request's last tokens) returns the page whole, once.

    A page named twice, and slots out of order, still free each page exactly once.
    """
    alloc = SWAKVAllocator(4 * page_size, 4 * page_size, page_size, device)
    slots = alloc.alloc(3 * page_size)
    assert slots is not None
    alloc.free(slots[page_size - 1 : page_size])  # the last slot of the first page
    assert alloc.full_available_size() == 2 * page_size
    assert alloc.swa_available_size() == 2 * page_size
    rest = slots[page_size:]
    alloc.free(torch.cat([rest[-1:], rest[:1], rest[:1], rest[page_size:]]))
    assert alloc.full_available_size() == 4 * page_size
    assert alloc.swa_available_size() == 4 * page_size
    alloc.sanity_check()


def test_sanity_check_catches_a_double_free(device: str) -> None:
    """Freeing the same slots twice is caught by sanity_check."""
    alloc = SWAKVAllocator(4, 4, 1, device)
    slots = alloc.alloc(2)
    assert slots is not None
    alloc.free(slots, swa_resident=True)
    alloc.free(slots, swa_resident=False)
    with pytest.raises(AssertionError, match="free twice"):
        alloc.sanity_check()
