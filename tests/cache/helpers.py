"""Small helpers shared by the tree tests: build a cache, serve one request."""

from __future__ import annotations

import torch

from cache import SWAKVAllocator, SWARadixCache


def make_cache(
    device: str,
    *,
    window: int,
    page_size: int = 1,
    full_size: int = 256,
    swa_size: int = 256,
    events: bool = True,
) -> SWARadixCache:
    """A cache over fresh pools, its constructor event already drained."""
    alloc = SWAKVAllocator(full_size, swa_size, page_size, device)
    cache = SWARadixCache(alloc, window, page_size, enable_events=events)
    cache.take_events()
    return cache


def serve(cache: SWARadixCache, tokens: list[int], extra_key: str | None = None) -> int:
    """Match, lock, allocate the rest, insert, unlock; return what insert reported cached."""
    match = cache.match_prefix(tokens, extra_key=extra_key)
    handle = cache.inc_lock_ref(match.last_node)
    matched = match.indices.numel()
    fresh = cache.allocator.alloc(len(tokens) - matched)
    assert fresh is not None, "test pools too small"
    value = torch.cat([match.indices, fresh])
    cached = cache.insert(tokens, value, prev_prefix_len=matched, extra_key=extra_key)
    cache.dec_lock_ref(match.last_node, handle)
    return cached


def fill(cache: SWARadixCache, tokens: list[int], extra_key: str | None = None) -> torch.Tensor:
    """Insert ``tokens`` with fresh slots (no match first); return the slots."""
    fresh = cache.allocator.alloc(len(tokens))
    assert fresh is not None, "test pools too small"
    cache.insert(tokens, fresh, extra_key=extra_key)
    return fresh
