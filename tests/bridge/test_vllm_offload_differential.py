"""Differential: vLLM 0.33.0's own scheduler with its CPU ``OffloadingConnector`` against our
follower's per-tier answers over HTTP, step by step.

vLLM's ``Scheduler`` with its ``KVCacheManager`` and the ``OffloadingConnector``'s CPU manager
(default settings, a small GPU pool and a small CPU pool, so both evict) serves a seeded chat
workload on the CPU (tests/peers/vllm_offload_engine.py, in bench/.venv-vllm; only the
GPU<->CPU copy is a stand-in, completing at once), publishing each step's batch through vLLM's
own ``ZmqEventPublisher`` -> ``Bridge`` (``--format vllm``) -> FileLog -> ``Follower`` -> the
routing API served over HTTP. After every step, for sampled prompts (held on the GPU only, on
the CPU only, on both, on the CPU past the GPU, on neither), the answer of ``POST /v1/match``
(one batch body per step) for the source must equal vLLM's own: top-level ``cached_tokens``
the GPU hit of ``kv_cache_manager.get_computed_blocks``, ``tiers["CPU"]["cached_tokens"]``
what the connector's ``get_num_new_matched_tokens`` would load after that hit (a source that
never reported the CPU tier answers none: 0). Both event shapes the connector has: the default
placeholders (one hash, no tokens, no parent, block size 0) and
``self_describing_kv_events``. ``SWA_ES_OFFLOAD_STEPS`` sets the steps per shape (default 700).

The run ends with the follower's replica equal to the bridge's mirror (state digest, tier terms
included). A self-test runs the same comparison on a peer that drops its CPU events before
publishing: it must report divergences (naming step, prompt and both answers), all of them CPU
answers. Another shows that asking vLLM changes nothing it publishes (the same seeded run, with
and without the probes, publishes the same events in the same order).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from consumers import Follower
from log import open_log
from swa_es.bridge.ingest import Bridge
from swa_es.service.http_app import AppParts, build_app
from swa_es.service.http_server import HttpServer
from swa_es.service.routing import FollowerRouting
from swa_es.service.service_metrics import registry_of
from swa_es.service.views import StandardViews
from tests.peers.sglang_venv import require_vllm
from tests.peers.vllm_offload_peer import TierProbe, VllmOffloadEngine

pytestmark = pytest.mark.vllm

SOURCE = "vo"
STEPS = int(os.environ.get("SWA_ES_OFFLOAD_STEPS", "700"))
GPU_BLOCKS = 64
CPU_BLOCKS = 80
SELF_TEST_STEPS = 400
PURITY_STEPS = 300
SHAPES = [
    pytest.param(False, id="placeholder-events"),
    pytest.param(True, id="self-describing-events"),
]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmOffloadEngine]:
    """One engine process for every run (vLLM takes long to import)."""
    require_vllm()
    where = tmp_path_factory.mktemp("offload")
    peer = VllmOffloadEngine(f"ipc://{where}/boot.pub", f"ipc://{where}/boot.replay")
    try:
        yield peer
    finally:
        peer.close()


@dataclass(frozen=True, slots=True)
class Divergence:
    """One prompt whose answers differ after a step."""

    step: int
    index: int
    probe: TierProbe
    ours: tuple[int | None, int | None]
    what: str

    def __str__(self) -> str:
        tokens = self.probe.tokens
        return (
            f"step {self.step}, prompt {self.index} ({len(tokens)} tokens, "
            f"{tokens[:6]}...{tokens[-3:]}, {self.probe.kind}): {self.what}: ours (GPU, CPU) "
            f"{self.ours}, vLLM {(self.probe.gpu, self.probe.cpu)}"
        )


@dataclass
class Run:
    """What a run saw: divergences, prompts by kind, whether the CPU tier was answered, and
    whether the follower's replica ended equal to the bridge's mirror (digest)."""

    divergences: list[Divergence]
    kinds: Counter[str]
    cpu_tier_seen: bool = False
    state_problem: str | None = None


@dataclass(frozen=True, slots=True)
class Served:
    """A bridged engine run: the bridge, the follower of its log and its routing API's URL."""

    bridge: Bridge
    follower: Follower
    views: StandardViews
    url: str


@asynccontextmanager
async def served(tmp_path: Path, engine: VllmOffloadEngine, **config: Any) -> AsyncIterator[Served]:
    """A fresh engine run bridged into a log, a follower of it and its routing API over HTTP."""
    pub, replay = f"ipc://{tmp_path}/kv.pub", f"ipc://{tmp_path}/kv.replay"
    async with (
        await open_log(f"file://{tmp_path}/log?fsync=never") as log,
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
        await anyio.to_thread.run_sync(
            lambda: engine.configure(endpoint=pub, replay_endpoint=replay, **config)
        )
        views = StandardViews.create()
        follower = Follower(log, views.all)
        parts = AppParts(
            registry_of(list), lambda: (True, "ok"), routing=FollowerRouting(follower, views)
        )
        async with HttpServer(build_app(parts)) as server:
            yield Served(bridge, follower, views, f"http://127.0.0.1:{server.port}/v1/match")
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


async def answers(client: httpx.AsyncClient, url: str, probes: list[TierProbe]) -> list[Any]:
    """The routing API's answer for the source, per prompt (None: the source holds none)."""
    body = {"prompts": [{"token_ids": probe.tokens} for probe in probes]}
    reply = await client.post(url, json=body)
    assert reply.status_code == 200, reply.text
    return [answer["sources"].get(SOURCE) for answer in reply.json()["answers"]]


def compare(step: int, index: int, probe: TierProbe, found: Any, run: Run) -> None:
    """Record how our answer for one prompt differs from vLLM's (nothing when equal)."""
    run.kinds[probe.kind] += 1
    if found is None:
        ours: tuple[int | None, int | None] = (0, 0)
    else:
        tiers = found.get("tiers") or {}
        cpu = tiers.get("CPU")
        run.cpu_tier_seen |= cpu is not None
        ours = (found["cached_tokens"], 0 if cpu is None else cpu["cached_tokens"])
        if found["state"] != "exact":
            run.divergences.append(Divergence(step, index, probe, ours, f"state {found}"))
            return
        gpu = tiers.get("GPU")
        if gpu is not None and gpu["cached_tokens"] != found["cached_tokens"]:
            what = f"tiers.GPU {gpu} differs from the top-level answer"
            run.divergences.append(Divergence(step, index, probe, ours, what))
    if ours[0] != probe.gpu:
        run.divergences.append(Divergence(step, index, probe, ours, "GPU"))
    elif probe.cpu is not None and ours[1] != probe.cpu:
        run.divergences.append(Divergence(step, index, probe, ours, "CPU"))


async def differential(engine: VllmOffloadEngine, tmp_path: Path, steps: int, **config: Any) -> Run:
    """``steps`` engine steps of a fresh run of ``config``, compared after every one."""
    run = Run([], Counter())
    async with served(tmp_path, engine, **config) as up, httpx.AsyncClient() as client:
        bridge = up.bridge
        for step in range(steps):
            seq, probes = await anyio.to_thread.run_sync(engine.step)
            if seq is not None:
                await applied(bridge, seq)
                await up.follower.catch_up()
            if probes:
                for index, (probe, found) in enumerate(
                    zip(probes, await answers(client, up.url, probes), strict=True)
                ):
                    compare(step, index, probe, found, run)
        assert bridge.lost is None and bridge.metrics.undecodable == 0, bridge.metrics
        tree = up.views.replicas[SOURCE]
        if tree.diverged is not None:
            run.state_problem = f"the follower's replica diverged: {tree.diverged}"
        elif tree.state_digest() != bridge.mirror.state_digest():
            run.state_problem = "the follower's state digest differs from the bridge mirror's"
    return run


@pytest.mark.timeout(600)
@pytest.mark.parametrize("self_describing", SHAPES)
async def test_follower_tiers_answer_what_vllm_offloading_loads(
    engine: VllmOffloadEngine, tmp_path: Path, self_describing: bool
) -> None:
    run = await differential(
        engine,
        tmp_path,
        STEPS,
        num_gpu_blocks=GPU_BLOCKS,
        num_cpu_blocks=CPU_BLOCKS,
        self_describing=self_describing,
        seed=7 + self_describing,
    )
    if run.divergences:
        shown = "\n".join(str(divergence) for divergence in run.divergences[:5])
        pytest.fail(f"{len(run.divergences)} divergence(s) ({run.state_problem}), first:\n{shown}")
    assert run.state_problem is None, run.state_problem
    stats = await anyio.to_thread.run_sync(engine.stats)
    # The run reached every case: both pools evicted, the connector stored and loaded, and
    # prompts of every kind were asked (none while a copy was in flight).
    events = stats["events"]
    assert events.get("GPU removed", 0) > 0 and events.get("CPU removed", 0) > 0, stats
    assert stats["loads"] > 0 and stats["stores"] > 0, stats
    assert run.cpu_tier_seen, "no answer carried a CPU tier"
    kinds = run.kinds
    assert "in flight" not in kinds, kinds
    for kind in ("GPU only", "CPU only", "both", "CPU past GPU", "neither"):
        assert kinds[kind] > 0, kinds
    # The shape asked for is the shape published: placeholders carry block size 0.
    assert stats["cpu_store_block_sizes"] == [16 if self_describing else 0], stats


async def test_the_comparison_fails_without_the_cpu_events(
    engine: VllmOffloadEngine, tmp_path: Path
) -> None:
    """Not vacuous: a peer that publishes only its GPU events leaves the follower without the
    CPU tier, and the comparison reports it (only CPU answers differ, each report naming the
    step, the prompt and both answers)."""
    run = await differential(
        engine,
        tmp_path,
        SELF_TEST_STEPS,
        num_gpu_blocks=GPU_BLOCKS,
        num_cpu_blocks=CPU_BLOCKS,
        seed=3,
        drop_tier_events=True,
    )
    assert run.divergences, run.kinds
    assert {divergence.what for divergence in run.divergences} == {"CPU"}, run.divergences[:3]
    assert not run.cpu_tier_seen and run.state_problem is None
    report = str(run.divergences[0])
    assert report.startswith(f"step {run.divergences[0].step}, prompt ") and "vLLM (" in report


def test_asking_vllm_changes_nothing_it_publishes(
    engine: VllmOffloadEngine, tmp_path: Path
) -> None:
    """The expected answers are asked without side effects: the same seeded run publishes the
    same events, in the same order, whether or not its prompts are probed after every step
    (self-describing events, where a lookup also reaches the connector's event tracker)."""
    fingerprints: list[str] = []
    asked = 0
    for probe in (True, False):
        where = f"ipc://{tmp_path}/purity-{probe}"
        engine.configure(
            endpoint=f"{where}.pub",
            replay_endpoint=f"{where}.replay",
            num_gpu_blocks=GPU_BLOCKS,
            num_cpu_blocks=CPU_BLOCKS,
            self_describing=True,
            seed=5,
        )
        for _ in range(PURITY_STEPS):
            asked += len(engine.step(probe=probe)[1])
        fingerprints.append(engine.stats()["fingerprint"])
    assert asked > PURITY_STEPS
    assert fingerprints[0] == fingerprints[1]
