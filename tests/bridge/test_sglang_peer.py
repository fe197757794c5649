"""The bridge against its real peer: sglang 0.5.16's ZmqEventPublisher fed by its SWARadixCache.

Each case ends with a follower replaying the log: the replica must hold exactly the blocks
sglang's tree holds (sglang's own block hashes), and report SWA-usable lengths as unknown.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from consumers import Follower, PrefixIndex, ReplicaSet
from log import EventLog, open_log
from swa_es.bridge.ingest import Bridge
from tests.bridge.waiting import free_port, wait_until
from tests.peers.sglang_venv import SglangEngine, require_sglang

pytestmark = pytest.mark.sglang


@pytest.fixture(autouse=True)
def _sglang_present() -> None:
    require_sglang()


_TCP: dict[Path, tuple[str, str]] = {}


def endpoints(tmp_path: Path) -> tuple[str, str]:
    """ipc:// endpoints, or tcp:// ones for a test that asked with ``use_tcp``."""
    if tmp_path in _TCP:
        return _TCP[tmp_path]
    return f"ipc://{tmp_path}/kv.pub", f"ipc://{tmp_path}/kv.replay"


def engine_endpoints(tmp_path: Path) -> tuple[str, str]:
    """What the engine binds: sglang binds a tcp:// endpoint only when its host is ``*``."""
    pub, replay = endpoints(tmp_path)
    return pub.replace("127.0.0.1", "*"), replay.replace("127.0.0.1", "*")


def use_tcp(tmp_path: Path) -> None:
    _TCP[tmp_path] = (f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}")


@asynccontextmanager
async def running_bridge(log: EventLog, tmp_path: Path) -> AsyncIterator[Bridge]:
    pub, replay = endpoints(tmp_path)
    async with (
        Bridge(
            log,
            endpoint=pub,
            replay_endpoint=replay,
            source="sg",
            wire_format="sglang",
            replay_timeout_s=1.0,
        ) as bridge,
        anyio.create_task_group() as tasks,
    ):
        tasks.start_soon(bridge.run)
        yield bridge
        tasks.cancel_scope.cancel()


async def replica_of(log: EventLog) -> tuple[ReplicaSet, Follower]:
    replicas = ReplicaSet()
    follower = Follower(log, [replicas, PrefixIndex(replicas)])
    await follower.catch_up()
    return replicas, follower


def assert_same_blocks(replicas: ReplicaSet, engine: SglangEngine) -> None:
    tree = replicas["sg"]
    assert tree.diverged is None
    held = {block.block_hash for block in tree.blocks()}
    expected = engine.blocks()
    assert expected, "the workload stored nothing"
    assert held == expected


async def serve(engine: SglangEngine, requests: int, seed: int = 0) -> int:
    return await anyio.to_thread.run_sync(engine.serve, requests, seed)


async def test_bridge_started_before_the_engine(tmp_path: Path) -> None:
    """The bridge waits for an engine that is not there yet, then follows it from seq 0."""
    async with await open_log(f"file://{tmp_path}/log") as log:
        async with running_bridge(log, tmp_path) as bridge:
            await anyio.sleep(0.3)
            engine = await anyio.to_thread.run_sync(SglangEngine, *engine_endpoints(tmp_path))
            try:
                published = await serve(engine, 80)
                await wait_until(lambda: bridge.tracker.expected == published, bridge=bridge)
            except BaseException:
                engine.kill()
                raise
        try:
            replicas, _ = await replica_of(log)
            assert_same_blocks(replicas, engine)
            assert bridge.metrics.epochs == 1 and bridge.metrics.unfilled_gaps == 0
        finally:
            engine.close()


async def test_engine_started_first_replay_fills_the_gap(tmp_path: Path) -> None:
    """What the engine published before the bridge came is taken from its replay socket."""
    engine = SglangEngine(*engine_endpoints(tmp_path))
    try:
        before = await serve(engine, 60)
        async with await open_log(f"file://{tmp_path}/log") as log:
            async with running_bridge(log, tmp_path) as bridge:
                published = await serve(engine, 60, seed=1)
                await wait_until(lambda: bridge.tracker.expected == published, bridge=bridge)
            assert bridge.metrics.replayed >= before
            replicas, follower = await replica_of(log)
            assert_same_blocks(replicas, engine)
            assert follower.metrics.digests_checked > 0
            assert follower.metrics.digest_mismatches == 0
            prompt = next(iter(replicas["sg"].blocks()))
            assert prompt is not None
            matches = PrefixIndex(replicas).match(list(prompt.token_ids))
            assert all(m.swa_tokens is None for m in matches.values())
    finally:
        engine.close()


async def test_engine_restarts_start_new_epochs(tmp_path: Path) -> None:
    """Each engine process bound to the same ipc:// endpoints after the last one exited is a
    new epoch holding only its run's blocks: a run that stays below the old seq (its batches
    never answer a replay from there) and one that passes it before the bridge's SUB has
    reconnected (its first messages lost to the slow join)."""
    runs = [(30, 0), (10, 7), (40, 8)]  # (requests, seed): shorter, then longer than the last
    engines: list[SglangEngine] = []
    try:
        async with await open_log(f"file://{tmp_path}/log") as log:
            async with running_bridge(log, tmp_path) as bridge:
                for restarts, (requests, seed) in enumerate(runs):
                    if engines:
                        await anyio.to_thread.run_sync(engines[-1].close)
                    engine = await anyio.to_thread.run_sync(
                        SglangEngine, *engine_endpoints(tmp_path)
                    )
                    engines.append(engine)
                    published = await serve(engine, requests, seed)
                    await wait_until(
                        lambda restarts=restarts, published=published: (
                            bridge.metrics.restarts == restarts
                            and bridge.tracker.expected == published
                        ),
                        bridge=bridge,
                    )
            # Read after the bridge left: leaving flushed every batch it appended.
            replicas, _ = await replica_of(log)
            assert_same_blocks(replicas, engines[-1])
            assert bridge.metrics.epochs == len(runs)
            assert bridge.metrics.disconnects == len(runs) - 1
            assert bridge.lost is None
    finally:
        for engine in engines[:-1]:
            engine.kill()
        if engines:
            engines[-1].close()


async def test_bridge_restarted_rebuilds_from_the_engine_replay(tmp_path: Path) -> None:
    """A second bridge run opens a new epoch rebuilt from the engine's replay buffer
    (over tcp://)."""
    use_tcp(tmp_path)
    engine = SglangEngine(*engine_endpoints(tmp_path))
    try:
        async with await open_log(f"file://{tmp_path}/log") as log:
            async with running_bridge(log, tmp_path) as bridge:
                published = await serve(engine, 40)
                await wait_until(lambda: bridge.tracker.expected == published, bridge=bridge)
            await serve(engine, 40, seed=3)  # while no bridge runs
            async with running_bridge(log, tmp_path) as bridge:
                published = await serve(engine, 20, seed=4)
                await wait_until(lambda: bridge.tracker.expected == published, bridge=bridge)
            replicas, follower = await replica_of(log)
            assert_same_blocks(replicas, engine)
            assert follower.metrics.divergences == 0
    finally:
        engine.close()


async def test_unreplayable_history_is_unknown_not_guessed(tmp_path: Path) -> None:
    """With a replay buffer that lost the start, the source is reported unknown."""
    engine = SglangEngine(*engine_endpoints(tmp_path), "--buffer-steps", "5")
    try:
        await serve(engine, 40)
        async with await open_log(f"file://{tmp_path}/log") as log:
            async with running_bridge(log, tmp_path) as bridge:
                await wait_until(lambda: bridge.metrics.unfilled_gaps == 1)
                published = await serve(engine, 5, seed=2)
                await wait_until(lambda: bridge.tracker.expected == published, bridge=bridge)
            replicas, _ = await replica_of(log)
            assert replicas["sg"].diverged is not None
            assert bridge.lost is not None
    finally:
        engine.close()
