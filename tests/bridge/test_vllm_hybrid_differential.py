"""Differential: vLLM 0.33.0's own hybrid KV-cache manager against our follower, step by step.

vLLM's ``KVCacheManager`` with a full-attention and a sliding-window group (block 16) serves a
seeded chat workload under pool pressure (both groups share one small block pool), publishing
each scheduler step through vLLM's own ``ZmqEventPublisher`` (tests/peers/vllm_hybrid_engine.py,
in bench/.venv-vllm) -> ``Bridge`` -> FileLog -> ``Follower``. After every step, for sampled
prompts (the running request, the last finished conversation, an older one, an older one cut
and continued), the routing API's answer (what ``POST /v1/match`` serves) must equal what
vLLM's own ``get_computed_blocks`` returns: ``cached_tokens`` its full-attention group's hit,
``usable_tokens`` its hybrid hit. Like for
like: vLLM is asked with ``max_cache_hit_length`` = the prompt's length (a match has no
``num_tokens - 1`` cap); its default, capped answer is compared with our usable length of the
prompt cut to whole blocks below its last token. Windows: 128, 33 (W - 1 a multiple of 16,
where vLLM needs one block fewer than ceil(W / 16)) and 64; retention 0 (vLLM's default: a sparse
sliding-window group) and None (dense); and two sliding-window groups of one spec (vLLM looks
them up jointly: a block is SWA-resident only where both hold it); 1500 steps each
(``SWA_ES_HYBRID_STEPS`` changes it).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from consumers import Follower
from log import open_log
from swa_es.bridge.ingest import Bridge
from swa_es.service.routing import FollowerRouting
from swa_es.service.views import StandardViews
from tests.peers.sglang_venv import require_vllm
from tests.peers.vllm_hybrid_peer import Probe, VllmHybridEngine

pytestmark = pytest.mark.vllm

SOURCE = "vh"
BLOCK = 16
STEPS = int(os.environ.get("SWA_ES_HYBRID_STEPS", "1500"))
CONFIGS = [
    pytest.param(128, 0, 80, 1, id="window128-retention0"),
    pytest.param(33, 0, 64, 1, id="window33-retention0"),
    pytest.param(64, None, 72, 1, id="window64-dense"),
    pytest.param(128, None, 80, 1, id="window128-dense"),
    pytest.param(48, 0, 100, 2, id="window48-retention0-two-swa-groups"),
]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmHybridEngine]:
    """One engine process for every configuration (vLLM takes long to import)."""
    require_vllm()
    where = tmp_path_factory.mktemp("hybrid")
    peer = VllmHybridEngine(f"ipc://{where}/boot.pub", f"ipc://{where}/boot.replay")
    try:
        yield peer
    finally:
        peer.close()


@asynccontextmanager
async def bridged(log_url: str, pub: str, replay: str) -> AsyncIterator[Bridge]:
    async with (
        await open_log(log_url) as log,
        Bridge(
            log,
            endpoint=pub,
            replay_endpoint=replay,
            source=SOURCE,
            wire_format="vllm",
            replay_timeout_s=2.0,
        ) as bridge,
        anyio.create_task_group() as tasks,
    ):
        tasks.start_soon(bridge.run)
        yield bridge
        tasks.cancel_scope.cancel()


async def applied(bridge: Bridge, seq: int) -> None:
    """Until the bridge has applied engine batch ``seq`` and made it durable."""
    with anyio.fail_after(60):
        while bridge.metrics.batches_applied <= seq or bridge.publisher is None:
            if bridge.lost is not None:
                raise AssertionError(f"the bridge lost the source: {bridge.lost}")
            await anyio.sleep(0.001)
    publisher = bridge.publisher
    assert publisher is not None
    await publisher.flush(timeout_s=30)


def ours(routing: FollowerRouting, tokens: list[int]) -> tuple[int | None, int | None]:
    """The routing API's answer (``POST /v1/match``) for the source: cached, usable."""
    found = routing.match(tokens, None).get(SOURCE)
    if found is None:
        return 0, 0
    assert found["state"] == "exact", found
    return found["cached_tokens"], found["usable_tokens"]


def compare(routing: FollowerRouting, probe: Probe, kinds: Counter[str]) -> list[str]:
    """The differences between our answers and vLLM's for one probe (empty: equal)."""
    problems: list[str] = []
    got = ours(routing, probe.tokens)
    if got != (probe.full, probe.hybrid):
        problems.append(f"uncapped: ours {got}, vLLM (full, hybrid) {(probe.full, probe.hybrid)}")
    cut = (len(probe.tokens) - 1) // BLOCK * BLOCK
    capped = ours(routing, probe.tokens[:cut])[1] if cut else 0
    if capped != probe.capped:
        problems.append(f"capped: ours {capped}, vLLM {probe.capped}")
    if probe.full == 0:
        kinds["not cached"] += 1
    elif probe.hybrid == probe.full:
        kinds["usable as cached"] += 1
    elif probe.hybrid == 0:
        kinds["cached, none usable"] += 1
    else:
        kinds["cached, partly usable"] += 1
    return problems


@pytest.mark.parametrize(("window", "retention", "num_blocks", "swa_groups"), CONFIGS)
async def test_follower_answers_what_vllm_hybrid_manager_matches(
    engine: VllmHybridEngine,
    tmp_path: Path,
    window: int,
    retention: int | None,
    num_blocks: int,
    swa_groups: int,
) -> None:
    pub, replay = f"ipc://{tmp_path}/kv.pub", f"ipc://{tmp_path}/kv.replay"
    log_url = f"file://{tmp_path}/log?fsync=never"
    kinds: Counter[str] = Counter()
    divergences: list[str] = []
    async with bridged(log_url, pub, replay) as bridge:
        await anyio.to_thread.run_sync(
            lambda: engine.configure(
                endpoint=pub,
                replay_endpoint=replay,
                window=window,
                retention=retention,
                num_blocks=num_blocks,
                seed=window,
                swa_groups=swa_groups,
            )
        )
        views = StandardViews.create()
        follower = Follower(bridge.log, views.all)
        routing = FollowerRouting(follower, views)
        replicas = views.replicas
        for step in range(STEPS):
            seq, probes = await anyio.to_thread.run_sync(engine.step)
            if seq is not None:
                await applied(bridge, seq)
                await follower.catch_up()
            for probe in probes:
                for problem in compare(routing, probe, kinds):
                    divergences.append(f"step {step}: {problem}")
        assert bridge.lost is None and bridge.metrics.undecodable == 0
        assert bridge.metrics.epochs == 1
        tree = replicas[SOURCE]
        assert tree.diverged is None
        assert tree.state_digest() == bridge.mirror.state_digest()
        meta = tree.meta
        assert meta is not None and meta.swa_events
        assert meta.sliding_window_size == max(1, window - 1)
        assert routing.sources()[SOURCE]["swa_residency"] == "events"
        removed = await anyio.to_thread.run_sync(engine.removed)
    assert divergences == [], f"{len(divergences)} divergence(s), first: {divergences[:5]}"
    # The workload reached every case: evictions from both groups' pools, tombstones that cut
    # a hit short or to nothing, prompts usable as far as cached, misses.
    assert min(removed) > 0, removed
    assert kinds["cached, partly usable"] > 0 and kinds["cached, none usable"] > 0, kinds
    assert kinds["usable as cached"] > 0 and kinds["not cached"] > 0, kinds
