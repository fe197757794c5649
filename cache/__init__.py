"""The SWA radix cache: two-pool KV allocator and radix tree on torch, emitting events.

torch is imported lazily: ``import cache.events`` stays light for consumers that never touch a
tensor; the tree names below load torch on first access.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from cache.errors import CacheError, LockError, SanityError

if TYPE_CHECKING:
    from cache.allocator import SWAKVAllocator
    from cache.tree.radix_cache import SWARadixCache
    from cache.tree.results import EvictResult, LockHandle, MatchResult

__all__ = [
    "SWAKVAllocator",
    "SWARadixCache",
    "EvictResult",
    "MatchResult",
    "LockHandle",
    "CacheError",
    "LockError",
    "SanityError",
]

_LAZY = {
    "SWAKVAllocator": "cache.allocator",
    "SWARadixCache": "cache.tree.radix_cache",
    "EvictResult": "cache.tree.results",
    "MatchResult": "cache.tree.results",
    "LockHandle": "cache.tree.results",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cache' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
