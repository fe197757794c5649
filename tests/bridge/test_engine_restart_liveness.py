"""Engine restarts on the same endpoint, seen by a router: sglang 0.5.16's and vLLM 0.33.0's
own publishers killed (SIGKILL, no shutdown) and started again on the same endpoints, so the
new run's seq starts again at 0, its replay ring is empty and its first live messages may be
lost to the slow join of the bridge's SUB.

A follower in the same process follows the log the bridge writes the whole time, and its
routing answers are sampled throughout:

- the killed engine turns ``offline`` by the bridge's marker (``--engine-timeout-s``);
- once it went offline, no answer ever offers the old run again (``exact`` in the old epoch),
  and the log holds no heartbeat of the old epoch after the marker;
- the new run is ``exact`` in a new epoch holding exactly the engine's own tree.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import TaskGroup

from cache.events.liveness import Liveness, decode_liveness, is_liveness
from consumers import Follower
from log import EventLog, open_log
from swa_es.bridge.ingest import Bridge
from swa_es.service.routing import FollowerRouting
from swa_es.service.views import StandardViews
from tests.bridge.test_vllm_peer import SOURCE as VLLM_SOURCE
from tests.bridge.test_vllm_peer import replica_prefixes
from tests.bridge.waiting import free_port, wait_until
from tests.peers.sglang_venv import PeerEngine, SglangEngine, VllmEngine

ENGINE_TIMEOUT_S = 1.5
SOURCE_TIMEOUT_S = 30.0  # longer than the engine timeout: offline comes from the bridge's marker
WAIT_S = 60.0


class Watched:
    """A follower of ``log`` (run in ``tasks``) with its routing, and every (state, epoch) of
    ``source`` it answered, sampled every 20 ms."""

    def __init__(self, log: EventLog, source: str) -> None:
        self.views = StandardViews.create(keep_tokens=True)  # blocks are named by their tokens
        self.follower = Follower(log, self.views.all, source_timeout_s=SOURCE_TIMEOUT_S)
        self.routing = FollowerRouting(self.follower, self.views)
        self.source = source
        self.seen: list[tuple[str, str]] = []

    def now(self) -> dict[str, Any] | None:
        return self.routing.sources().get(self.source)

    async def sample(self) -> None:
        while True:
            found = self.now()
            if found is not None:
                self.seen.append((found["state"], found["epoch"]))
            await anyio.sleep(0.02)

    async def start(self, tasks: TaskGroup) -> None:
        await tasks.start(self.follower.run)
        tasks.start_soon(self.sample)

    async def until(self, what: str, condition: Callable[[dict[str, Any]], bool]) -> None:
        def holds() -> bool:
            found = self.now()
            return found is not None and condition(found)

        try:
            await wait_until(holds, WAIT_S)
        except TimeoutError:
            raise AssertionError(f"no {what}: {self.now()}") from None


def bridge_of(log: EventLog, pub: str, replay: str, source: str, wire_format: str) -> Bridge:
    return Bridge(
        log,
        endpoint=pub,
        replay_endpoint=replay,
        source=source,
        wire_format=wire_format,
        replay_timeout_s=0.5,
        idle_probe_s=0.3,
        heartbeat_s=0.2,
        engine_timeout_s=ENGINE_TIMEOUT_S,
    )


async def old_epoch_after_its_marker(log: EventLog, source: str, epoch: str) -> list[str]:
    """The liveness records of ``epoch`` that follow its first offline marker in the log."""
    marked = False
    after: list[str] = []
    async for record in log.read():
        if record.key != source or not is_liveness(record.payload):
            continue
        live = decode_liveness(record.payload)
        if live.epoch != epoch:
            continue
        if marked:
            after.append(live.kind.value)
        marked = marked or live.kind is Liveness.OFFLINE
    assert marked, "the old epoch was never marked offline"
    return after


async def kill_and_restart(
    tmp_path: Path,
    source: str,
    wire_format: str,
    start: Callable[[], PeerEngine],
    engine_blocks: Callable[[PeerEngine], set[Any]],
    replica_blocks: Callable[[Watched], set[Any]],
) -> None:
    """The scenario of the module docstring for one engine."""
    engines: list[PeerEngine] = []

    async def serve(requests: int, seed: int) -> int:
        return await anyio.to_thread.run_sync(engines[-1].serve, requests, seed)

    async with await open_log(f"file://{tmp_path}/log") as log:
        watched = Watched(log, source)
        try:
            async with (
                bridge_of(log, *endpoints(tmp_path), source, wire_format) as bridge,
                anyio.create_task_group() as tasks,
            ):
                tasks.start_soon(bridge.run)
                engines.append(await anyio.to_thread.run_sync(start))
                published = await serve(20, 0)
                await wait_until(lambda: bridge.tracker.expected == published, bridge=bridge)
                await watched.start(tasks)
                await watched.until("exact first run", lambda s: s["state"] == "exact")
                first = engine_blocks(engines[-1])
                await wait_until(lambda: replica_blocks(watched) == first, WAIT_S)
                old_epoch = watched.now()["epoch"]  # type: ignore[index]

                await anyio.to_thread.run_sync(engines[-1].kill)
                await watched.until("offline by the marker", lambda s: s["state"] == "offline")
                gone = watched.now()
                assert gone is not None
                assert (
                    gone["offline"] == f"offline marker: engine unheard for {ENGINE_TIMEOUT_S:g} s"
                )
                assert bridge.metrics.engine_offline == 1

                engines.append(await anyio.to_thread.run_sync(start))
                published = await serve(15, 5)
                await wait_until(
                    lambda: bridge.metrics.restarts == 1 and bridge.tracker.expected == published,
                    bridge=bridge,
                )
                await watched.until(
                    "exact in a new epoch",
                    lambda s: s["state"] == "exact" and s["epoch"] != old_epoch,
                )
                second = engine_blocks(engines[-1])
                await wait_until(lambda: replica_blocks(watched) == second, WAIT_S)
                tasks.cancel_scope.cancel()
        finally:
            for engine in engines:
                engine.kill()
        offline_at = watched.seen.index(("offline", old_epoch))
        assert ("exact", old_epoch) not in watched.seen[offline_at:], "the old run came back"
        assert watched.follower.metrics.divergences == 0
        assert bridge.lost is None and bridge.metrics.epochs == 2
        assert await old_epoch_after_its_marker(log, source, old_epoch) == []


_ENDPOINTS: dict[Path, tuple[str, str, str, str]] = {}


def endpoints(tmp_path: Path) -> tuple[str, str]:
    """Where the bridge connects (tcp:// on loopback)."""
    return _ENDPOINTS[tmp_path][:2]


def binds(tmp_path: Path) -> tuple[str, str]:
    """What the engine binds (every interface: sglang binds tcp:// only with host ``*``)."""
    return _ENDPOINTS[tmp_path][2:]


def pick_endpoints(tmp_path: Path) -> None:
    ports = free_port(), free_port()
    _ENDPOINTS[tmp_path] = (
        f"tcp://127.0.0.1:{ports[0]}",
        f"tcp://127.0.0.1:{ports[1]}",
        f"tcp://*:{ports[0]}",
        f"tcp://*:{ports[1]}",
    )


@pytest.mark.sglang
async def test_sglang_publisher_killed_and_restarted(tmp_path: Path) -> None:
    """sglang 0.5.16's own SWARadixCache and ZmqEventPublisher, killed and restarted."""
    pick_endpoints(tmp_path)

    def sglang_blocks(engine: PeerEngine) -> set[Any]:
        assert isinstance(engine, SglangEngine)
        return set(engine.blocks())

    def replica_hashes(watched: Watched) -> set[Any]:
        return {block.block_hash for block in watched.views.replicas["sg"].blocks()}

    await kill_and_restart(
        tmp_path,
        "sg",
        "sglang",
        lambda: SglangEngine(*binds(tmp_path)),
        sglang_blocks,
        replica_hashes,
    )


@pytest.mark.vllm
async def test_vllm_publisher_killed_and_restarted(tmp_path: Path) -> None:
    """vLLM 0.33.0's own KVCacheManager and ZmqEventPublisher, killed and restarted."""
    pick_endpoints(tmp_path)

    def vllm_prefixes(engine: PeerEngine) -> set[Any]:
        assert isinstance(engine, VllmEngine)
        return set(engine.prefixes()[0])

    def replica_names(watched: Watched) -> set[Any]:
        return set(replica_prefixes(watched.views.replicas))

    await kill_and_restart(
        tmp_path,
        VLLM_SOURCE,
        "vllm",
        lambda: VllmEngine(*binds(tmp_path)),
        vllm_prefixes,
        replica_names,
    )
