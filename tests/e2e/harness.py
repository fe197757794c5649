"""Shared pieces of the end-to-end tests: primaries on real trees, and what they should answer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio

from cache import SWAKVAllocator, SWARadixCache
from cache.tree.node import TreeNode
from consumers import Follower, View
from log import EventLog
from swa_es import Publisher
from swa_es.engine.worker import CacheWorker
from swa_es.engine.workload import ChatRequest, ChatWorkload

PAGE_SIZE = 4
WINDOW_TOKENS = 128


def make_workload(seed: int) -> ChatWorkload:
    """The chat workload scaled down (shorter prompts and turns) so tests stay fast."""
    return ChatWorkload(
        seed=seed,
        system_prompts=6,
        system_prompt_tokens=128,
        user_turn_tokens=16,
        assistant_turn_tokens=32,
        max_conversation_tokens=640,
        max_open_conversations=12,
        vocab_size=500,
    )


def make_cache(device: str, *, page_size: int = PAGE_SIZE) -> SWARadixCache:
    """A small two-pool tree with events on: small enough that the workload evicts often, in
    both pools (so tombstones, restores and removals all appear)."""
    allocator = SWAKVAllocator(full_size=4096, swa_size=768, page_size=page_size, device=device)
    return SWARadixCache(allocator, sliding_window_size=WINDOW_TOKENS, page_size=page_size)


@dataclass
class Primary:
    """One worker: its tree, its serving driver and the prompts it has served."""

    source: str
    cache: SWARadixCache
    worker: CacheWorker
    served: list[ChatRequest] = field(default_factory=list)

    @classmethod
    def create(cls, source: str, device: str, *, page_size: int = PAGE_SIZE) -> Primary:
        """A fresh worker on its own tree."""
        cache = make_cache(device, page_size=page_size)
        return cls(source, cache, CacheWorker(cache))

    def serve(self, request: ChatRequest) -> None:
        """Serve one request (mutating the tree) and remember it."""
        self.worker.serve(request)
        self.served.append(request)


async def drive(
    primaries: Sequence[Primary],
    publishers: Sequence[Publisher],
    workload: ChatWorkload,
    requests: int,
) -> None:
    """Round-robin ``requests`` workload requests over the primaries, one step each, yielding
    to the event loop between steps like a real serving loop does."""
    for i in range(requests):
        k = i % len(primaries)
        primaries[k].serve(workload.next_request())
        publishers[k].step()
        await anyio.lowlevel.checkpoint()


def _child(node: TreeNode, tokens: Sequence[int], pos: int, page_size: int) -> TreeNode | None:
    key = tokens[pos] if page_size == 1 else tuple(tokens[pos : pos + page_size])
    return node.children.get(key)


def full_match_tokens(cache: SWARadixCache, tokens: Sequence[int]) -> int:
    """The longest page-aligned prefix of ``tokens`` whose pages the tree holds (tombstoned or
    not), read from the public node attributes without touching the tree."""
    page = cache.page_size
    end = len(tokens) - len(tokens) % page
    node, pos = cache.root, 0
    while pos < end:
        child = _child(node, tokens, pos, page)
        if child is None:
            break
        own = child.token_ids
        shared = 0
        while shared < len(own) and pos + shared < end and own[shared] == tokens[pos + shared]:
            shared += 1
        pos += shared - shared % page
        if shared < len(own):
            break
        node = child
    return pos


def swa_match_tokens(cache: SWARadixCache, tokens: Sequence[int]) -> int:
    """The length ``cache.match_prefix`` returns (it may split nodes, which changes no block)."""
    return int(cache.match_prefix(list(tokens)).indices.numel())


def sample_prompts(primary: Primary, workload: ChatWorkload, count: int) -> list[list[int]]:
    """Prompts to ask about: served ones (hits, partial hits after eviction) and fresh ones."""
    served = primary.served[:: max(1, len(primary.served) // count)][:count]
    prompts = [list(r.prompt_ids) + list(r.output_ids) for r in served]
    prompts += [list(workload.next_request().prompt_ids) for _ in range(count // 2)]
    return prompts


async def follow(log: EventLog, *views: View) -> Follower:
    """Catch a fresh follower up on ``log``; it must end with no source diverged, and with every
    in-band digest it met checked and equal."""
    follower = Follower(log, views=list(views))
    await follower.catch_up()
    assert follower.diverged() == {}
    assert follower.metrics.digests_checked > 0 and follower.metrics.digest_mismatches == 0
    return follower
