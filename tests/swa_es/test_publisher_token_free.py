"""A token-free publisher (``PublisherConfig(token_ids=False)``, the writers' ``--no-token-ids``):
no token id reaches the log, and nothing else changes.

Every record is scanned as bytes (no ``token_ids`` list holds anything) and decoded (every
``BlockStored`` has ``token_ids=()``, each epoch's meta says ``token_ids: false``). The same
workload published both ways, by a real tree (the native recorder path, tombstones and resets
included) and by a bridge's mirror (the event-list path, lower tiers and removal reasons
included), gives a follower the same blocks, digests, SWA residency, tiers, prefix matches and
snapshots.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import anyio.lowlevel
import pytest

from cache import SWARadixCache
from cache.events import BlockStored, decode_batch
from cache.events.liveness import is_liveness
from consumers import Follower, ReplicaSet
from log import EventLog, MemoryLog, open_log
from swa_es import Publisher
from swa_es.bridge.formats import EngineCleared, EngineEvent, EngineRemoved, EngineStored
from swa_es.bridge.mirror import MirrorCache
from swa_es.engine.engine import CacheConfig, build_cache
from swa_es.engine.worker import CacheWorker
from swa_es.engine.workload import ChatWorkload
from swa_es.publish.config import PublisherConfig
from swa_es.service.views import StandardViews
from tests.oracles.sink import attach_reference
from tests.swa_es.doubles import replay
from tests.swa_es.test_publisher_native import (
    ReferencePath,
    assert_same_records,
    small_tree,
    workload,
)

WRITTEN_TOKENS = re.compile(rb'"token_ids":\[[^\]]')
"""A token list that holds something, in a record's bytes."""


async def batch_payloads(log: EventLog) -> list[bytes]:
    """Every batch record of ``log`` (liveness records left out), as its bytes."""
    return [record.payload async for record in log.read() if not is_liveness(record.payload)]


def assert_token_free(payloads: list[bytes]) -> None:
    """No record says a token id: no token list holds anything, every store has none, and
    every epoch's meta says so."""
    assert payloads
    stores = 0
    for payload in payloads:
        assert WRITTEN_TOKENS.search(payload) is None, payload[:300]
        batch = decode_batch(payload)
        if batch.meta is not None:
            assert batch.meta.token_ids is False
            assert b'"token_ids":false' in payload
        for event in batch.events:
            if isinstance(event, BlockStored):
                assert event.token_ids == () and event.block_size > 0
                stores += 1
    assert stores > 0


@pytest.mark.parametrize("page_size", [1, 4])
async def test_a_token_free_tree_writes_the_reference_records_without_token_ids(
    page_size: int,
) -> None:
    """The native encoder thread withholding token ids writes byte for byte what the Python
    builder and the reference codec write when told the same."""
    rng = random.Random(page_size)
    cache = small_tree(page_size)
    twin = attach_reference(cache)
    worker = CacheWorker(cache)
    limits = {"digest_every_batches": 3, "max_events_per_batch": 97}
    reference = ReferencePath(cache, twin, **limits, token_ids=False)
    log = MemoryLog()
    config = PublisherConfig(digest_every_batches=3, max_events_per_batch=97, token_ids=False)
    async with Publisher(cache, log, "w0", config=config) as pub:
        reference.open_epoch()
        for request in workload(page_size, 60):
            worker.serve(request)  # type: ignore[arg-type]  # a ChatRequest
            if rng.random() < 0.03:
                cache.reset()
            pub.step()
            reference.step()
            if rng.random() < 0.3:
                await anyio.lowlevel.checkpoint()
        reference.step()  # the publisher's last step, taken on leaving
    payloads = await batch_payloads(log)
    assert_same_records(payloads, reference.batches)
    assert_token_free(payloads)
    state = (await replay(log))["w0"]
    assert state.digest.hexdigest() == cache.state_digest()
    assert state.digests_checked > 5


def replica_state(replicas: ReplicaSet, source: str) -> dict[str, object]:
    """Everything ``replicas`` say of ``source`` but its meta."""
    tree = replicas[source]
    return {
        "digest": tree.state_digest(),
        "blocks": sorted(
            (block.block_hash, block.parent_block_hash, block.swa_resident)
            for block in tree.blocks()
        ),
        "tombstones": tree.tombstone_count,
        "block_size": tree.block_size,
        "tiers": {medium: sorted(tree.tier_blocks(medium)) for medium in tree.tiers()},
    }


class Followed:
    """What a follower of one log knows once caught up."""

    def __init__(self, views: StandardViews) -> None:
        self.views = views

    @classmethod
    async def of(cls, log: EventLog) -> Followed:
        views = StandardViews.create()
        follower = Follower(log, views.all)
        await follower.catch_up()
        assert follower.metrics.divergences == 0
        return cls(views)

    def state(self, source: str) -> dict[str, object]:
        """``replica_state`` of the follower's replicas."""
        return replica_state(self.views.replicas, source)

    def loaded(self, source: str) -> dict[str, object]:
        """``replica_state`` of the replicas a snapshot of the follower's loads to."""
        replicas = ReplicaSet(keep_tokens=False)
        replicas.load(self.views.replicas.snapshot())
        return replica_state(replicas, source)


TOMBSTONING = CacheConfig(window_tokens=64, page_size=4, full_size=16384, swa_size=4096)
"""A cache whose SWA pool runs short often: it holds tombstones most of the time."""


async def _serve_tree(log: EventLog, token_ids: bool) -> tuple[SWARadixCache, list[list[int]]]:
    """A tree serving a seeded workload (a reset, evictions and tombstones included), published
    to ``log``; the tree and the prompts it served."""
    cache = build_cache(TOMBSTONING)
    worker = CacheWorker(cache)
    chat = ChatWorkload(seed=0)
    prompts: list[list[int]] = []
    config = PublisherConfig(digest_every_batches=4, token_ids=token_ids)
    async with Publisher(cache, log, "w0", config=config) as pub:
        for index in range(70):
            request = chat.next_request()
            worker.serve(request)
            prompts.append(request.prompt_ids)
            if index == 10:
                cache.reset()
            pub.step()
            await anyio.lowlevel.checkpoint()
    return cache, prompts


async def test_the_same_workload_both_ways_gives_a_follower_the_same_answers(
    tmp_path: Path,
) -> None:
    """A tree's workload published with and without token ids (each to a FileLog): the same
    blocks, residency, digests, matches and snapshots; only the token-free log is free of
    token ids."""
    followed: dict[bool, Followed] = {}
    payloads: dict[bool, list[bytes]] = {}
    for token_ids in (True, False):
        async with await open_log((tmp_path / f"log-{token_ids}").as_uri()) as log:
            cache, prompts = await _serve_tree(log, token_ids)
            payloads[token_ids] = await batch_payloads(log)
            followed[token_ids] = await Followed.of(log)
        assert followed[token_ids].views.replicas["w0"].state_digest() == cache.state_digest()
    assert_token_free(payloads[False])
    assert any(WRITTEN_TOKENS.search(payload) for payload in payloads[True])
    with_ids, without = followed[True], followed[False]
    assert without.state("w0") == with_ids.state("w0")
    assert without.state("w0")["tombstones"], "the workload tombstones some blocks"
    assert without.loaded("w0") == with_ids.loaded("w0") == with_ids.state("w0")
    matched = 0
    for prompt in prompts:
        answer = without.views.prefix.match(prompt)
        assert answer == with_ids.views.prefix.match(prompt)
        matched += bool(answer)
    assert matched > len(prompts) // 2
    assert without.views.replicas.meta_of("w0").token_ids is False  # type: ignore[union-attr]


PAGE = 2
TOKENS = tuple(range(1, 13))  # six pages: engine keys 1..6


def _store(key: int, medium: str = "GPU") -> EngineStored:
    """sglang's store of one page (key k under key k - 1)."""
    return EngineStored(
        (key,), key - 1 or None, TOKENS[(key - 1) * PAGE : key * PAGE], PAGE, medium
    )


ENGINE_STEPS: tuple[tuple[EngineEvent, ...], ...] = (
    (EngineStored((1, 2, 3), None, TOKENS[:6], PAGE, "GPU"),),
    (_store(4), _store(2, "CPU_PINNED"), _store(3, "DISK")),
    (EngineRemoved((4,), "GPU"), EngineRemoved((3,), "GPU")),
    (_store(5, "CPU_PINNED"), EngineStored((9,), None, (), 0, "CPU")),
    (EngineCleared(),),
    (_store(1), _store(2), _store(2, "DISK")),
)
"""An engine's batches with lower tiers (sglang's media), demotions, evictions and a clear."""


async def _bridge(log: EventLog, token_ids: bool) -> MirrorCache:
    mirror = MirrorCache()
    mirror.apply(ENGINE_STEPS[0][0])
    config = PublisherConfig(token_ids=token_ids)
    async with Publisher(mirror, log, "sg", meta=mirror.meta(PAGE), config=config) as pub:
        for step in ENGINE_STEPS[1:]:
            for event in step:
                mirror.apply(event)
            pub.step()
    return mirror


async def test_a_token_free_bridge_keeps_tiers_and_removals_the_same() -> None:
    """A bridge's mirror (lower tiers, demotions, a clear) published both ways: the same
    replicas on every tier; no token id in the token-free log."""
    states = []
    for token_ids in (True, False):
        log = MemoryLog()
        mirror = await _bridge(log, token_ids)
        followed = await Followed.of(log)
        assert followed.views.replicas["sg"].state_digest() == mirror.state_digest()
        states.append(followed.state("sg"))
        if not token_ids:
            assert_token_free(await batch_payloads(log))
    assert states[0] == states[1]
    assert states[0]["tiers"] and states[0]["blocks"]
