"""A real ``SWARadixCache`` driven through the public cache API (docs/design.md §3) by a seeded RNG.

``CacheDriver`` does what a serving engine does with a request's KV cache (match, lock,
allocate with eviction, insert, unlock), plus the rarer operations a model test wants: locks
held across steps, explicit full and SWA eviction, bare matches (which split nodes and touch
recency) and ``reset``. It is the primary of the fault, model and soak tests.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import torch

from cache import LockError, SWAKVAllocator, SWARadixCache


@dataclass(frozen=True, slots=True)
class CacheShape:
    """Pool sizes, page size and window of one driven cache."""

    page_size: int = 4
    window: int = 8
    full_size: int = 512
    swa_size: int = 128

    @classmethod
    def random(cls, rng: random.Random) -> CacheShape:
        """A small random shape (small pools, so eviction and tombstones happen often)."""
        page = rng.choice([1, 1, 2, 4])
        window = page * rng.randint(1, 4)
        full = page * rng.randint(24, 96)
        swa = page * rng.randint(8, max(8, full // page // 2))
        return cls(page, window, full, swa)


@dataclass(slots=True)
class _Held:
    node: Any
    handle: Any
    generation: int


class CacheDriver:
    """Serves random prompts with shared prefixes on a fresh cache (events on)."""

    def __init__(self, rng: random.Random, shape: CacheShape | None = None) -> None:
        self.rng = rng
        self.shape = shape or CacheShape()
        self.allocator = SWAKVAllocator(
            full_size=self.shape.full_size,
            swa_size=self.shape.swa_size,
            page_size=self.shape.page_size,
            device="cpu",
        )
        self.cache = SWARadixCache(
            self.allocator,
            sliding_window_size=self.shape.window,
            page_size=self.shape.page_size,
            enable_events=True,
        )
        self._prefixes = [
            [rng.randrange(50) for _ in range(rng.randint(2, 12))] for _ in range(rng.randint(2, 6))
        ]
        self._held: list[_Held] = []
        self._generation = 0
        self.requests = 0

    # --- prompts ---------------------------------------------------------------------------

    def prompt(self) -> list[int]:
        """A shared prefix (sometimes) plus a random tail."""
        rng = self.rng
        head = list(rng.choice(self._prefixes)) if rng.random() < 0.8 else []
        return head + [rng.randrange(200) for _ in range(rng.randint(0, 10))]

    def extra_key(self) -> str | None:
        """Mostly the default namespace, sometimes one of two others."""
        return self.rng.choice([None, None, None, None, "lora-a", "salt-b"])

    # --- operations ------------------------------------------------------------------------

    def serve(self) -> bool:
        """One request: match, lock, allocate (evicting when short), insert, unlock. False when
        the pools cannot hold it even after eviction (nothing changes then but eviction)."""
        tokens, extra_key = self.prompt(), self.extra_key()
        page = self.shape.page_size
        match = self.cache.match_prefix(tokens, extra_key=extra_key)
        matched = int(match.indices.numel())
        handle = self.cache.inc_lock_ref(match.last_node)
        try:
            needed = -(-(len(tokens) - matched) // page) * page
            fresh = self._alloc(needed)
            if fresh is None:
                return False
            aligned = len(tokens) // page * page
            owned = aligned - matched
            value = torch.cat((match.indices, fresh[:owned]))
            self.cache.insert(tokens[:aligned], value, prev_prefix_len=matched, extra_key=extra_key)
            if owned < needed:
                self.allocator.free(fresh[owned:])
        finally:
            self.cache.dec_lock_ref(match.last_node, handle)
        self.requests += 1
        return True

    def hold(self) -> None:
        """Match a prompt and keep its path locked across later operations."""
        match = self.cache.match_prefix(self.prompt(), extra_key=self.extra_key())
        handle = self.cache.inc_lock_ref(match.last_node)
        self._held.append(_Held(match.last_node, handle, self._generation))

    def release(self) -> None:
        """Unlock one held path (a lock from before a ``reset`` is void: unlocking refuses)."""
        if not self._held:
            return
        held = self._held.pop(self.rng.randrange(len(self._held)))
        if held.generation == self._generation:
            self.cache.dec_lock_ref(held.node, held.handle)
        else:
            try:
                self.cache.dec_lock_ref(held.node, held.handle)
            except LockError:
                pass
            else:
                raise AssertionError("unlocking a lock from before reset() did not refuse")

    def release_all(self) -> None:
        """Unlock every held path."""
        while self._held:
            self.release()

    def evict(self) -> None:
        """Evict a random amount of full or SWA KV (or both)."""
        rng = self.rng
        full = rng.choice([0, 0, rng.randint(1, 4 * self.shape.page_size)])
        swa = rng.choice([0, rng.randint(1, 4 * self.shape.page_size)])
        self.cache.evict(full_tokens=full, swa_tokens=swa)

    def match(self) -> None:
        """A bare match: splits nodes on partial matches and touches recency."""
        self.cache.match_prefix(self.prompt(), extra_key=self.extra_key())

    def reset(self) -> None:
        """Drop the whole tree (AllBlocksCleared); held locks become void."""
        self.cache.reset()
        self._generation += 1

    def check(self) -> None:
        """The tree's own invariants (raises ``SanityError``)."""
        self.cache.sanity_check()

    def _alloc(self, needed: int) -> torch.Tensor | None:
        while True:
            fresh = self.allocator.alloc(needed)
            if fresh is not None:
                return fresh
            full_short = max(0, needed - self.allocator.full_available_size())
            swa_short = max(0, needed - self.allocator.swa_available_size())
            result = self.cache.evict(full_tokens=full_short, swa_tokens=swa_short)
            if result.full_evicted == 0 and result.swa_evicted == 0:
                return None
