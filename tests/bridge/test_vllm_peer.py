"""The bridge against vLLM 0.33.0's own ZmqEventPublisher, fed by vLLM's KVCacheManager.

vLLM names blocks by its own sha256 hashes; the bridge re-keys them into ours from the tokens.
So each case compares token prefixes: every block of the replica, named by the token prefix it
ends (its parents' tokens then its own), against every block vLLM's prefix cache holds, named
the same way by the engine script. The two sets must be equal.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from consumers import Follower, PrefixIndex, ReplicaSet
from log import EventLog, open_log
from swa_es.bridge.ingest import Bridge
from tests.bridge.waiting import free_port, wait_until
from tests.peers.sglang_venv import VllmEngine, require_vllm

pytestmark = pytest.mark.vllm

SOURCE = "vl"


@pytest.fixture(autouse=True)
def _vllm_present() -> None:
    require_vllm()


@asynccontextmanager
async def running_bridge(log: EventLog, pub: str, replay: str) -> AsyncIterator[Bridge]:
    async with (
        Bridge(
            log,
            endpoint=pub,
            replay_endpoint=replay,
            source=SOURCE,
            wire_format="vllm",
            replay_timeout_s=1.0,
        ) as bridge,
        anyio.create_task_group() as tasks,
    ):
        tasks.start_soon(bridge.run)
        yield bridge
        tasks.cancel_scope.cancel()


async def start_engine(*args: str) -> VllmEngine:
    return await anyio.to_thread.run_sync(VllmEngine, *args)


async def serve(engine: VllmEngine, requests: int, seed: int = 0) -> int:
    return await anyio.to_thread.run_sync(engine.serve, requests, seed)


async def replica_of(log: EventLog) -> ReplicaSet:
    replicas = ReplicaSet()
    await Follower(log, [replicas, PrefixIndex(replicas)]).catch_up()
    return replicas


def replica_prefixes(replicas: ReplicaSet) -> list[str]:
    """Every block of the replica, named by the sha256 of the token prefix it ends."""
    tree = replicas[SOURCE]
    assert tree.diverged is None
    blocks = {block.block_hash: block for block in tree.blocks()}
    names: list[str] = []
    for block in blocks.values():
        chain: list[tuple[int, ...]] = []
        current = block
        while True:
            chain.append(current.token_ids)
            if current.parent_block_hash is None:
                break
            current = blocks[current.parent_block_hash]
        tokens = [token for page in reversed(chain) for token in page]
        names.append(hashlib.sha256(",".join(map(str, tokens)).encode()).hexdigest())
    return names


def assert_same_blocks(replicas: ReplicaSet, engine: VllmEngine) -> int:
    """The replica holds exactly vLLM's cached blocks; how many vLLM evicted so far."""
    held = replica_prefixes(replicas)
    expected, removed = engine.prefixes()
    assert expected, "the workload cached nothing"
    assert len(held) == len(set(held))
    assert set(held) == expected
    return removed


async def test_bridge_started_before_the_engine(tmp_path: Path) -> None:
    """The bridge waits for vLLM's publisher, then mirrors its cache (evictions included)."""
    pub, replay = f"ipc://{tmp_path}/kv.pub", f"ipc://{tmp_path}/kv.replay"
    async with await open_log(f"file://{tmp_path}/log") as log:
        async with running_bridge(log, pub, replay) as bridge:
            await anyio.sleep(0.3)
            engine = await start_engine(pub, replay, "--num-blocks", "256")
            try:
                published = await serve(engine, 80)
                await wait_until(lambda: bridge.tracker.expected == published, bridge=bridge)
            except BaseException:
                engine.kill()
                raise
        try:
            replicas = await replica_of(log)
            assert assert_same_blocks(replicas, engine) > 0, "no eviction exercised"
            assert bridge.metrics.epochs == 1 and bridge.metrics.unfilled_gaps == 0
            assert bridge.metrics.undecodable == 0
        finally:
            engine.close()


async def test_engine_first_then_restarts_and_bridge_restart(tmp_path: Path) -> None:
    """Over tcp://: what vLLM published before the bridge came is replayed; a bridge run after
    a pause rebuilds from the replay buffer; a restarted engine is a new epoch holding only
    its own blocks, with SWA-usable lengths unknown throughout."""
    ports = free_port(), free_port()
    bind = f"tcp://*:{ports[0]}", f"tcp://*:{ports[1]}"
    pub, replay = f"tcp://127.0.0.1:{ports[0]}", f"tcp://127.0.0.1:{ports[1]}"
    engine = await start_engine(*bind)
    try:
        before = await serve(engine, 40)
        async with await open_log(f"file://{tmp_path}/log") as log:
            async with running_bridge(log, pub, replay) as bridge:
                published = await serve(engine, 40, seed=1)
                await wait_until(lambda: bridge.tracker.expected == published, bridge=bridge)
            assert bridge.metrics.replayed >= before
            assert_same_blocks(await replica_of(log), engine)

            await serve(engine, 20, seed=2)  # while no bridge runs
            async with running_bridge(log, pub, replay) as bridge:
                published = await serve(engine, 20, seed=3)
                await wait_until(lambda: bridge.tracker.expected == published, bridge=bridge)
                assert bridge.publisher is not None
                await bridge.publisher.flush(timeout_s=30)  # appended is not yet durable
                replicas = await replica_of(log)
                assert_same_blocks(replicas, engine)

                await anyio.to_thread.run_sync(engine.close)
                engine = await start_engine(*bind)
                published = await serve(engine, 30, seed=4)
                await wait_until(
                    lambda: bridge.metrics.restarts == 1 and bridge.tracker.expected == published,
                    bridge=bridge,
                )
            replicas = await replica_of(log)
            assert_same_blocks(replicas, engine)
            assert bridge.lost is None
            root = next(b for b in replicas[SOURCE].blocks() if b.parent_block_hash is None)
            match = PrefixIndex(replicas).match(list(root.token_ids))[SOURCE]
            assert match.full_tokens == len(root.token_ids)
            assert match.swa_tokens is None  # vLLM's stream says nothing of SWA residency
    finally:
        engine.close()
