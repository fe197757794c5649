"""Model-based test of the SWA radix cache: random serving steps vs invariants and a replica."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from cache import LockError, LockHandle, MatchResult, SWAKVAllocator, SWARadixCache
from cache.events import BlockStored
from swa_es.testing import BlockModel

NAMESPACES = [None, "lora-a"]
PROMPTS = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], [1, 2, 3, 4, 9, 9, 9, 9, 7, 7, 7, 7], [5] * 12]

# Requests share prompt prefixes (so nodes split, tombstone and restore) and end in a tail.
TOKENS = st.builds(
    lambda prompt, cut, tail: PROMPTS[prompt][:cut] + tail,
    st.integers(0, len(PROMPTS) - 1),
    st.integers(0, 12),
    st.lists(st.integers(0, 3), max_size=12),
)


@dataclass
class InFlight:
    """A request between its lock and its insert: what the serving loop holds."""

    tokens: list[int]
    extra_key: str | None
    match: MatchResult
    handle: LockHandle
    fresh: torch.Tensor
    generation: int


def path_tokens(node: object) -> list[int]:
    """The tokens from the root to ``node``."""
    parts = []
    while node.parent is not None:  # type: ignore[attr-defined]  # a TreeNode
        parts.append(list(node.token_ids))  # type: ignore[attr-defined]  # a TreeNode
        node = node.parent  # type: ignore[attr-defined]  # a TreeNode
    return [t for part in reversed(parts) for t in part]


def walk(root: Any) -> list[Any]:
    """Every node under ``root``."""
    out, stack = [], list(root.children.values())
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(node.children.values())
    return out


def swa_valid(node: object, window: int) -> bool:
    """The SWA rule of docs/design.md §3, checked on the path itself: no tombstone, or the window
    resident after the last one."""
    run = 0
    while node.parent is not None:  # type: ignore[attr-defined]  # a TreeNode
        if node.swa_tombstone:  # type: ignore[attr-defined]  # a TreeNode
            return run >= window
        run += len(node.token_ids)  # type: ignore[attr-defined]  # a TreeNode
        node = node.parent  # type: ignore[attr-defined]  # a TreeNode
    return True


class CacheMachine(RuleBasedStateMachine):
    """Drives match / lock / alloc / insert / unlock / evict / reset in random orders."""

    device = "cpu"

    def __init__(self) -> None:
        super().__init__()
        self.reference = BlockModel()
        self.in_flight: list[InFlight] = []
        self.generation = 0

    @initialize(
        page_size=st.sampled_from([1, 2, 4]),
        window=st.integers(min_value=1, max_value=9),
        events=st.booleans(),
    )
    def setup(self, page_size: int, window: int, events: bool) -> None:
        """A small tree so eviction and tombstoning happen often."""
        self.page_size = page_size
        self.window = window
        # SWA is the scarcer pool, as in serving, so tombstones and restores are common.
        self.alloc = SWAKVAllocator(32 * page_size, 10 * page_size, page_size, self.device)
        self.cache = SWARadixCache(self.alloc, window, page_size, enable_events=events)
        self.events = events
        self._drain()

    def _drain(self) -> None:
        events = self.cache.take_events()
        if self.events:
            stored = [e for e in events if isinstance(e, BlockStored)]
            assert all(len(e.block_hashes) == 1 for e in stored), "one BlockStored per page"
            self.reference.apply_all(events)
        else:
            assert events == []

    def _caller_held(self) -> int:
        return sum(r.fresh.numel() for r in self.in_flight)

    @rule(tokens=TOKENS, extra_key=st.sampled_from(NAMESPACES), evict_when_short=st.booleans())
    def start_request(
        self, tokens: list[int], extra_key: str | None, evict_when_short: bool
    ) -> None:
        """Match, lock, allocate the uncached part (evicting when short) and hold it."""
        match = self.cache.match_prefix(tokens, extra_key=extra_key)
        matched = match.indices.numel()
        assert matched % self.page_size == 0
        assert path_tokens(match.last_node) == tokens[:matched]
        assert swa_valid(match.last_node, self.window)
        handle = self.cache.inc_lock_ref(match.last_node)
        need = (len(tokens) - matched) // self.page_size * self.page_size
        fresh = self.alloc.alloc(need)
        if fresh is None and evict_when_short:
            self.cache.evict(
                full_tokens=max(0, need - self.alloc.full_available_size()),
                swa_tokens=max(0, need - self.alloc.swa_available_size()),
            )
            fresh = self.alloc.alloc(need)
        if fresh is None:
            self.cache.dec_lock_ref(match.last_node, handle)
            return
        self.in_flight.append(InFlight(tokens, extra_key, match, handle, fresh, self.generation))

    @precondition(lambda self: self.in_flight)
    @rule(data=st.data())
    def finish_request(self, data: st.DataObject) -> None:
        """Insert a held request's tokens with its matched + fresh slots, then unlock."""
        self._finish(self.in_flight.pop(data.draw(st.integers(0, len(self.in_flight) - 1))))

    @rule(tokens=TOKENS, extra_key=st.sampled_from(NAMESPACES))
    def serve(self, tokens: list[int], extra_key: str | None) -> None:
        """One whole serving step: match, lock, allocate (evicting when short), insert, unlock."""
        self.start_request(tokens, extra_key, evict_when_short=True)
        if self.in_flight and self.in_flight[-1].tokens is tokens:
            self._finish(self.in_flight.pop())

    @rule(data=st.data(), extra_key=st.sampled_from(NAMESPACES))
    def serve_through_tombstone(self, data: st.DataObject, extra_key: str | None) -> None:
        """Serve a request whose key runs through a tombstone, so insert may restore it."""
        root = self.cache.match_prefix([], extra_key=extra_key).last_node
        tombstones = [n for n in walk(root) if n.swa_tombstone]
        if not tombstones:
            return
        node = tombstones[data.draw(st.integers(0, len(tombstones) - 1))]
        while node.children and data.draw(st.booleans()):
            node = next(iter(node.children.values()))
        tail = data.draw(st.lists(st.integers(0, 3), max_size=4))
        self.serve(path_tokens(node) + tail, extra_key)

    def _finish(self, req: InFlight) -> None:
        if req.generation != self.generation:
            with pytest.raises(LockError):
                self.cache.dec_lock_ref(req.match.last_node, req.handle)
            self.alloc.free(req.fresh)
            return
        matched = req.match.indices.numel()
        usable = matched + req.fresh.numel()
        value = torch.cat([req.match.indices, req.fresh])
        cached = self.cache.insert(
            req.tokens[:usable], value, prev_prefix_len=matched, extra_key=req.extra_key
        )
        assert matched <= cached <= usable
        self.cache.dec_lock_ref(req.match.last_node, req.handle)

    @precondition(lambda self: self.in_flight)
    @rule(data=st.data())
    def abort_request(self, data: st.DataObject) -> None:
        """Give a held request's fresh slots back and unlock it."""
        req = self.in_flight.pop(data.draw(st.integers(0, len(self.in_flight) - 1)))
        self.alloc.free(req.fresh)
        if req.generation != self.generation:
            with pytest.raises(LockError):
                self.cache.dec_lock_ref(req.match.last_node, req.handle)
        else:
            self.cache.dec_lock_ref(req.match.last_node, req.handle)

    @rule(full=st.integers(0, 30) | st.just(0), swa=st.integers(0, 30))
    def evict(self, full: int, swa: int) -> None:
        """Evict; the SWA count equals what the pool got back, the full count at most that.

        As sglang's, the SWA phase leaves the tombstoned ancestors deleted with a leaf out of
        the full count.
        """
        before = (self.alloc.full_available_size(), self.alloc.swa_available_size())
        result = self.cache.evict(full_tokens=full, swa_tokens=swa)
        after = (self.alloc.full_available_size(), self.alloc.swa_available_size())
        assert result.full_evicted <= after[0] - before[0]
        assert result.swa_evicted == after[1] - before[1]

    @rule(tokens=TOKENS, extra_key=st.sampled_from(NAMESPACES))
    def match_only(self, tokens: list[int], extra_key: str | None) -> None:
        """A bare match returns a valid prefix and splits nothing it should not."""
        match = self.cache.match_prefix(tokens, extra_key=extra_key)
        assert path_tokens(match.last_node) == tokens[: match.indices.numel()]
        assert swa_valid(match.last_node, self.window)

    @rule(roll=st.integers(0, 7))
    def reset(self, roll: int) -> None:
        """Reset (one roll in eight) returns every tree slot; held requests' locks go stale."""
        if roll:
            return
        self.cache.reset()
        self.generation += 1
        assert self.cache.total_size() == (0, 0)

    @invariant()
    def consistent(self) -> None:
        """Invariants hold, pools add up exactly, and the replica's digest matches."""
        if not hasattr(self, "cache"):
            return
        held = self._caller_held()
        self.cache.sanity_check(caller_held_full=held, caller_held_swa=held)
        self._drain()
        if self.events:
            assert self.reference.hexdigest() == self.cache.state_digest()


@pytest.mark.slow
def test_model_based(device: str) -> None:
    """Random serving sequences keep every invariant and the replica digest in step."""
    CacheMachine.device = device
    run_state_machine_as_test(
        CacheMachine,
        settings=settings(
            max_examples=150,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
