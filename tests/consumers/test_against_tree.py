"""Replicas and the prefix index against a real SWARadixCache driven by a random workload."""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Any

import pytest

pytest.importorskip("cache.tree")

import torch

from cache import SWAKVAllocator, SWARadixCache
from cache.events import (
    DIGEST_ALGORITHM,
    AllBlocksCleared,
    BatchMeta,
    EventBatch,
    decode_batch,
    encode_batch,
)
from consumers import Follower, PrefixIndex, PrefixMatch, ReplicaSet
from log import MemoryLog


def _held_tokens(cache: SWARadixCache, token_ids: Sequence[int]) -> int:
    """The longest page-aligned prefix of ``token_ids`` present in the tree, tombstones or not."""
    page = cache.page_size
    node: Any = cache.root
    matched = 0
    while True:
        nxt = token_ids[matched : matched + page]
        if len(nxt) < page:
            return matched
        child = next((c for c in node.children.values() if c.token_ids[:page] == tuple(nxt)), None)
        if child is None:
            return matched
        key = child.token_ids
        pages = 0
        while (pages + 1) * page <= len(key) and tuple(
            token_ids[matched + pages * page : matched + (pages + 1) * page]
        ) == key[pages * page : (pages + 1) * page]:
            pages += 1
        matched += pages * page
        if pages * page < len(key):
            return matched
        node = child


def _serve(cache: SWARadixCache, token_ids: list[int]) -> None:
    page = cache.page_size
    tokens = token_ids[: len(token_ids) - len(token_ids) % page]
    if not tokens:
        return
    match = cache.match_prefix(tokens)
    handle = cache.inc_lock_ref(match.last_node)
    need = len(tokens) - match.indices.numel()
    fresh = cache.allocator.alloc(need) if need else match.indices[:0]
    if fresh is None:
        cache.evict(full_tokens=need, swa_tokens=need)
        fresh = cache.allocator.alloc(need)
    if fresh is not None:
        value = torch.cat([match.indices, fresh])
        cache.insert(tokens, value, prev_prefix_len=match.indices.numel())
    cache.dec_lock_ref(match.last_node, handle)


class _Workload:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.prefixes = [[self.rng.randrange(50) for _ in range(12)] for _ in range(4)]
        self.recent: list[list[int]] = []

    def request(self) -> list[int]:
        base = self.rng.choice(self.prefixes)[: self.rng.randrange(2, 13)]
        tokens = base + [self.rng.randrange(50) for _ in range(self.rng.randrange(0, 14))]
        self.recent = [*self.recent[-15:], tokens]
        return tokens

    def query(self) -> list[int]:
        if self.recent and self.rng.random() < 0.7:
            return self.rng.choice(self.recent)
        return self.request()


def _check_matches(cache: SWARadixCache, index: PrefixIndex, workload: _Workload, seq: int) -> int:
    """Compare three sampled queries; return how many the SWA rule cut short."""
    swa_limited = 0
    for _ in range(3):
        query = workload.query()
        expected_full = _held_tokens(cache, query)
        found = index.match(query).get("w", PrefixMatch(0, 0))
        usable = cache.match_prefix(query).indices.numel()
        assert found == PrefixMatch(expected_full, usable), f"step {seq}, query {query}"
        swa_limited += usable < expected_full
    return swa_limited


@pytest.mark.parametrize(("page_size", "window"), [(1, 4), (4, 6)])
async def test_replica_and_prefix_index_agree_with_the_tree(
    device: str, page_size: int, window: int
) -> None:
    """After every step the replica digest equals the tree's; matches equal match_prefix."""
    alloc = SWAKVAllocator(full_size=160, swa_size=64, page_size=page_size, device=device)
    cache = SWARadixCache(
        alloc, sliding_window_size=window, page_size=page_size, enable_events=True
    )
    replicas = ReplicaSet()
    index = PrefixIndex(replicas)
    workload = _Workload(seed=page_size)
    records: list[bytes] = []
    meta = BatchMeta(page_size, window, digest_alg=DIGEST_ALGORITHM)
    swa_limited = 0
    for seq in range(300):
        _serve(cache, workload.request())
        if seq % 3 == 1:
            cache.evict(swa_tokens=workload.rng.randrange(1, 3 * page_size + 2))
        if seq == 150:
            cache.reset()
        events = tuple(cache.take_events())
        if seq == 0:
            events = (AllBlocksCleared(), *events)  # the tree starts empty: an epoch start
        digest = cache.state_digest()
        batch = EventBatch("w", "e", seq, time.time(), events, digest, meta if seq == 0 else None)
        records.append(encode_batch(batch))
        replicas.apply(decode_batch(records[-1]))
        assert replicas["w"].state_digest() == digest, f"step {seq}"
        swa_limited += _check_matches(cache, index, workload, seq)

    assert swa_limited >= 5  # the workload really exercised the SWA rule

    log = MemoryLog()
    await log.append_batch([("w", r) for r in records])
    fresh = ReplicaSet()
    follower = Follower(log, [fresh])
    await follower.catch_up()
    assert follower.diverged() == {}
    assert follower.metrics.digests_checked == 300
    assert fresh["w"].state_digest() == cache.state_digest()
