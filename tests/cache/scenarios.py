"""A reusable tree shape for SWA tests: a tombstoned prefix P with a resident child X.

Built through public operations only: P (2 pages) gets two children, X (``x_pages``) and Y
(1 page); X is touched last, so SWA eviction deletes Y and then tombstones P, the least recent.
"""

from __future__ import annotations

from dataclasses import dataclass

from cache import SWARadixCache
from tests.cache.helpers import fill, make_cache


def pages(first: int, count: int, page_size: int) -> list[int]:
    """``count`` pages of distinct tokens starting at token ``first * page_size``."""
    return list(range(first * page_size, (first + count) * page_size))


@dataclass
class TombstonedPrefix:
    """The cache, and the token lists of P, P+X and P+Y."""

    cache: SWARadixCache
    p: list[int]
    px: list[int]
    py: list[int]


def tombstoned_prefix(
    device: str, *, page_size: int, window: int, x_pages: int = 3
) -> TombstonedPrefix:
    """Build P(tombstone) → X(resident); Y has been evicted."""
    cache = make_cache(device, window=window, page_size=page_size)
    p = pages(1, 2, page_size)
    px = p + pages(10, x_pages, page_size)
    py = p + pages(50, 1, page_size)
    fill(cache, px)
    fill(cache, py)
    cache.match_prefix(px)  # X (and P) become more recent than Y
    cache.evict(swa_tokens=page_size + 1)  # Y is deleted, then P (internal) is tombstoned
    assert cache.match_prefix(py).indices.numel() == 0
    return TombstonedPrefix(cache, p, px, py)
