"""The one step program both caches run, over a small adapter protocol.

Each side (our ``cache.SWARadixCache`` in the test process, sglang's ``SWARadixCache`` in a
subprocess of its own venv) wraps its cache in a ``CacheUnderTest`` and feeds the same steps to
a ``StepRunner``. A step's outcome is plain JSON data: what every call returned, in order, then
both pools' available sizes, ``total_size()`` and the step's events as a sorted multiset. The
test compares the two sides' outcomes step by step.

The window-capped SWA lock (see ``intended.py``) is kept out of the comparison by how a request
is built, not by what is compared: when the lock span would end inside a node, a *boundary
match* ``match(tokens[:matched - span])`` first splits that node (the same split on both sides),
then the request matches again and locks.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from tests.differential.steps import Evict, Finish, Request, Reset, Scratch, Step

Outcome = dict[str, Any]
"""One step's observable result (JSON data)."""


@dataclass(frozen=True, slots=True)
class Matched:
    """A prefix match: its length, slots, end node and the node ends along the path."""

    length: int
    indices: torch.Tensor
    node: object
    boundaries: list[int]


class CacheUnderTest(Protocol):
    """What the step program needs from a cache and its allocator."""

    @property
    def page_size(self) -> int:
        """Tokens per page."""
        ...

    @property
    def window(self) -> int:
        """The sliding window in tokens."""
        ...

    def match(self, tokens: Sequence[int]) -> Matched:
        """``match_prefix`` of ``tokens``."""
        ...

    def lock(self, node: object) -> object:
        """``inc_lock_ref`` on ``node``; returns what unlocking needs."""
        ...

    def unlock(self, node: object, lock: object) -> None:
        """``dec_lock_ref`` of a lock ``lock`` returned."""
        ...

    def alloc(self, n: int) -> torch.Tensor | None:
        """``n`` fresh full slots (each with an SWA slot), None when a pool is short."""
        ...

    def free(self, slots: torch.Tensor) -> None:
        """Return full slots and their SWA slots."""
        ...

    def free_swa(self, slots: torch.Tensor) -> None:
        """Return only the SWA slots of ``slots``."""
        ...

    def insert(self, tokens: Sequence[int], value: torch.Tensor, prev: int) -> int:
        """``insert`` with ``prev_prefix_len=prev``; the length already cached."""
        ...

    def evict(self, full: int, swa: int) -> tuple[int, int]:
        """``evict``; the (full, swa) counts reported."""
        ...

    def reset(self) -> None:
        """Drop the whole tree and return every slot to the pools."""
        ...

    def pools(self) -> tuple[int, int]:
        """Available (full, swa) slots."""
        ...

    def total_size(self) -> tuple[int, int]:
        """``total_size()``."""
        ...

    def take_events(self) -> list[list[Any]]:
        """This step's BlockStored / BlockRemoved / AllBlocksCleared events as JSON lists."""
        ...

    def check(self, locks_held: bool) -> None:
        """Run the cache's own sanity check (raise on a broken invariant)."""
        ...

    def describe(self) -> list[str]:
        """The tree and both LRU orders as text, for divergence reports (never compared)."""
        ...


def canonical(outcome: Outcome) -> Outcome:
    """``outcome`` as it reads after a JSON round trip (tuples become lists)."""
    result: Outcome = json.loads(json.dumps(outcome))
    return result


class StepRunner:
    """Runs steps on one cache and records each step's outcome.

    After an exception the runner records it and refuses further steps: the two sides' states
    are no longer comparable.
    """

    def __init__(self, cache: CacheUnderTest) -> None:
        self._cache = cache
        page, window = cache.page_size, cache.window
        self._lock_span = -(-window // page) * page
        self._held: list[tuple[object, object]] = []
        self._broken = False

    def start(self) -> Outcome:
        """The outcome of building the cache (its first events)."""
        return self._finish_outcome([])

    def run(self, step: Step) -> Outcome:
        """Run ``step``; its outcome, or ``{"error": ...}`` if the cache raised."""
        if self._broken:
            return {"error": "not run: an earlier step failed"}
        try:
            trace = self._dispatch(step)
            return self._finish_outcome(trace)
        except Exception as exc:  # any failure of the cache under test is an outcome
            self._broken = True
            return {"error": f"{type(exc).__name__}: {exc}"}

    def describe(self) -> list[str]:
        """The cache's own description of its state."""
        return self._cache.describe()

    def _finish_outcome(self, trace: list[list[Any]]) -> Outcome:
        cache = self._cache
        cache.check(locks_held=bool(self._held))
        events = sorted(cache.take_events(), key=json.dumps)
        return canonical(
            {
                "trace": trace,
                "pools": cache.pools(),
                "total_size": cache.total_size(),
                "events": events,
            }
        )

    def _dispatch(self, step: Step) -> list[list[Any]]:
        match step:
            case Request():
                return self._request(step)
            case Finish(pick=pick):
                if not self._held:
                    return [["finish", None]]
                index = pick % len(self._held)
                node, lock = self._held.pop(index)
                self._cache.unlock(node, lock)
                return [["finish", index]]
            case Evict(full=full, swa=swa):
                return [["evict", *self._cache.evict(full, swa)]]
            case Reset():
                self._release_all()
                self._cache.reset()
                return [["reset"]]
            case Scratch():
                return self._scratch(step)
        raise AssertionError(f"unknown step {step!r}")

    def _release_all(self) -> None:
        while self._held:
            node, lock = self._held.pop()
            self._cache.unlock(node, lock)

    def _request(self, step: Request) -> list[list[Any]]:
        cache, page = self._cache, self._cache.page_size
        tokens, prompt = step.tokens, step.tokens[: step.prompt]
        trace: list[list[Any]] = []
        m = cache.match(prompt)
        trace.append(["match", m.length, m.boundaries])
        cut = m.length - self._lock_span
        if cut > 0 and cut not in m.boundaries:
            boundary = cache.match(prompt[:cut])
            trace.append(["boundary-match", boundary.length, boundary.boundaries])
            m = cache.match(prompt)
            trace.append(["match", m.length, m.boundaries])
        lock = cache.lock(m.node)
        extend = len(tokens) - m.length
        fresh = self._alloc(-(-extend // page) * page, trace)
        if fresh is None:
            cache.unlock(m.node, lock)
            return trace
        aligned = len(tokens) // page * page
        owned = aligned - m.length
        kv = fresh[:extend]  # what an engine's extend allocation hands the request
        value = torch.cat((m.indices, kv[:owned]))
        trace.append(["insert", cache.insert(tokens[:aligned], value, m.length)])
        if extend > owned:
            cache.free(kv[owned:])  # the unaligned tail: part of a page, freed as a whole
        if step.hold:
            self._held.append((m.node, lock))
        else:
            cache.unlock(m.node, lock)
        return trace

    def _alloc(self, need: int, trace: list[list[Any]]) -> torch.Tensor | None:
        cache = self._cache
        while True:
            fresh = cache.alloc(need)
            if fresh is not None:
                return fresh
            full_avail, swa_avail = cache.pools()
            full_short, swa_short = max(0, need - full_avail), max(0, need - swa_avail)
            evicted = cache.evict(full_short, swa_short)
            trace.append(["evict", full_short, swa_short, *evicted, *cache.pools()])
            if evicted == (0, 0):
                trace.append(["alloc-failed", need])
                return None

    def _scratch(self, step: Scratch) -> list[list[Any]]:
        cache = self._cache
        n = step.pages * cache.page_size
        fresh = cache.alloc(n)
        if fresh is None:
            return [["scratch-none", n]]
        trace: list[list[Any]] = [["scratch", n, *cache.pools()]]
        start, stop = min(step.start, n), min(step.stop, n)
        if start < stop:
            cache.free_swa(fresh[start:stop])
            trace.append(["free_swa", start, stop, *cache.pools()])
        cache.free(fresh)
        trace.append(["free", *cache.pools()])
        return trace
