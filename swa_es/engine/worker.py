"""A minimal serving driver: one request at a time on a ``SWARadixCache``.

``CacheWorker.serve`` does what a serving engine's scheduler does with a request's KV cache,
minus the model: match the prompt's cached prefix, lock it, allocate slots for the rest of the
prompt and the output (page-aligned; evicting from the tree when a pool is short), cache the whole
sequence, unlock. Afterwards the worker holds no slot: every slot it allocated is either owned by
the tree or back in the allocator, so ``free + held by the tree == pool size`` holds exactly
between requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from cache.errors import SwaEsError

if TYPE_CHECKING:
    from cache import SWARadixCache
    from swa_es.engine.workload import ChatRequest

__all__ = ["CacheFullError", "CacheWorker", "ServeOutcome"]


@dataclass(frozen=True, slots=True)
class ServeOutcome:
    """What serving one request did to the cache (all counts in tokens)."""

    conversation_id: int
    matched_tokens: int
    """Prefix length ``match_prefix`` returned (reused KV)."""
    allocated_tokens: int
    """Fresh slots taken from each pool (page-aligned)."""
    cached_before_tokens: int
    """Prefix length ``insert`` found already cached (>= ``matched_tokens``)."""
    inserted_tokens: int
    """Page-aligned length of prompt plus output handed to the tree."""
    full_evicted_tokens: int
    swa_evicted_tokens: int


class CacheFullError(SwaEsError, RuntimeError):
    """The pools cannot hold a request even after evicting everything unlocked."""

    def __init__(
        self, conversation_id: int, needed_tokens: int, full_available: int, swa_available: int
    ) -> None:
        super().__init__(
            f"request of conversation {conversation_id} needs {needed_tokens} slots of each pool; "
            f"after eviction only {full_available} full and {swa_available} SWA slots are free"
        )
        self.conversation_id = conversation_id
        self.needed_tokens = needed_tokens
        self.full_available = full_available
        self.swa_available = swa_available


class CacheWorker:
    """Serves ``ChatRequest``s on ``cache``: match → lock → alloc (evict) → insert → unlock."""

    def __init__(self, cache: SWARadixCache) -> None:
        self._cache = cache
        self._allocator = cache.allocator
        self._page_size = cache.page_size

    @property
    def cache(self) -> SWARadixCache:
        """The cache this worker serves on."""
        return self._cache

    def serve(self, request: ChatRequest) -> ServeOutcome:
        """Run one request's KV-cache life cycle; raise ``CacheFullError`` if it cannot fit."""
        cache = self._cache
        page = self._page_size
        tokens = request.prompt_ids + request.output_ids
        match = cache.match_prefix(request.prompt_ids)
        matched = int(match.indices.numel())
        handle = cache.inc_lock_ref(match.last_node)
        try:
            needed = -(-(len(tokens) - matched) // page) * page
            fresh, full_evicted, swa_evicted = self._alloc(request.conversation_id, needed)
            aligned = len(tokens) // page * page
            owned = aligned - matched
            value = torch.cat((match.indices, fresh[:owned]))
            cached_before = cache.insert(tokens[:aligned], value, prev_prefix_len=matched)
            if owned < needed:
                # The slots of the trailing partial page (one whole allocated page) stay ours.
                self._allocator.free(fresh[owned:])
        finally:
            cache.dec_lock_ref(match.last_node, handle)
        return ServeOutcome(
            conversation_id=request.conversation_id,
            matched_tokens=matched,
            allocated_tokens=needed,
            cached_before_tokens=cached_before,
            inserted_tokens=aligned,
            full_evicted_tokens=full_evicted,
            swa_evicted_tokens=swa_evicted,
        )

    def _alloc(self, conversation_id: int, needed: int) -> tuple[torch.Tensor, int, int]:
        """``needed`` fresh slots, evicting from the tree until they fit; with eviction counts."""
        allocator = self._allocator
        full_evicted = swa_evicted = 0
        while True:
            fresh = allocator.alloc(needed)
            if fresh is not None:
                return fresh, full_evicted, swa_evicted
            full_short = max(0, needed - allocator.full_available_size())
            swa_short = max(0, needed - allocator.swa_available_size())
            result = self._cache.evict(full_tokens=full_short, swa_tokens=swa_short)
            if result.full_evicted == 0 and result.swa_evicted == 0:
                raise CacheFullError(
                    conversation_id,
                    needed,
                    allocator.full_available_size(),
                    allocator.swa_available_size(),
                )
            full_evicted += result.full_evicted
            swa_evicted += result.swa_evicted
