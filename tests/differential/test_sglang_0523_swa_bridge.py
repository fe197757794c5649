"""The bridged SWA differential on sglang 0.5.23: its own ``UnifiedRadixCache`` (FULL and SWA
components) under its default tree core, the bundled Rust one, with
``swa_es.integrations.sglang`` installed, its events through sglang's own
``SchedulerKvEventsPublisher`` and ``ZmqEventPublisher`` into ``swa_es.bridge.Bridge``, a
``FileLog`` and a ``Follower``.

After every step of a seeded serving loop under pressure on both pools
(``tests/peers/sglang_0523_swa_engine.py``: requests, long decodes that free SWA below the
window, running requests that release their SWA lock early, direct evictions, resets), for each
prompt the engine sampled (the one just served, a partly cached one, one whose window was freed,
one fully evicted) the follower's ``PrefixIndex.match`` for the bridged source (what ``POST
/v1/match`` answers) must equal sglang's own answer: ``usable_tokens`` its ``match_prefix``
length, ``cached_tokens`` the full-KV prefix its tree holds.

One case runs sglang's Python tree core instead. ``SWA_ES_SWA_0523_DIFF_STEPS`` sets the steps
per Rust-core case (default 1,000: 4,400 steps in all).
Skipped without bench/.venv-sglang-0523 unless ``SWA_ES_REQUIRE_SGLANG_0523=1``.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from consumers import Follower, PrefixIndex, ReplicaSet
from log import open_log
from swa_es.bridge.ingest import Bridge
from tests.differential.test_sglang_swa_bridge import SOURCE, _answer, _synced
from tests.peers.sglang_0523_swa_peer import Sglang0523SwaEngine, require_sglang_0523

pytestmark = pytest.mark.sglang

STEPS = int(os.environ.get("SWA_ES_SWA_0523_DIFF_STEPS", "1000"))

RUST, PYTHON = "RustUnifiedTreeCore", "UnifiedTreeCore"
# (page size, window, full pool, SWA pool, longest conversation, seed, sglang's tree core,
#  the bridge's --format)
CASES = [
    pytest.param(1, 4, 768, 320, 192, 21, RUST, "sglang", id="page1-window4"),
    pytest.param(1, 16, 1024, 384, 256, 22, RUST, "sglang", id="page1-window16"),
    pytest.param(4, 8, 1024, 384, 256, 23, RUST, "auto", id="page4-window8-format-auto"),
    pytest.param(2, 32, 1536, 512, 320, 24, RUST, "sglang", id="page2-window32"),
    pytest.param(2, 8, 1024, 384, 256, 25, PYTHON, "sglang", id="page2-window8-python-core"),
]
"""The Rust core (sglang's default, what users run) in every case but one, which selects
sglang's Python core (about four times slower a step, so it runs 2/5 of the steps)."""


@pytest.fixture(scope="module")
def engine() -> Iterator[Sglang0523SwaEngine]:
    """One engine process for every case (importing sglang is its slow part)."""
    require_sglang_0523()
    peer = Sglang0523SwaEngine()
    try:
        yield peer
    finally:
        peer.close()


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("page", "window", "full", "swa", "longest", "seed", "core", "wire"), CASES
)
async def test_follower_matches_sglang_0523_after_every_step(
    engine: Sglang0523SwaEngine,
    tmp_path: Path,
    page: int,
    window: int,
    full: int,
    swa: int,
    longest: int,
    seed: int,
    core: str,
    wire: str,
) -> None:
    """0 divergences between the follower's match and sglang 0.5.23's own, step after step."""
    pub, replay = f"ipc://{tmp_path}/kv.pub", f"ipc://{tmp_path}/kv.replay"
    case = {"page_size": page, "window": window, "full_size": full, "swa_size": swa}
    case |= {"max_tokens": longest, "seed": seed, "endpoint": pub, "replay_endpoint": replay}
    case["core"] = None if core == RUST else "python"  # None: sglang's default
    started = await anyio.to_thread.run_sync(lambda: engine.start(**case))
    assert started["core"] == core, started
    steps = STEPS if core == RUST else STEPS * 2 // 5
    divergences: list[dict[str, Any]] = []
    kinds: Counter[str] = Counter()
    ops: Counter[str] = Counter()
    tombstones = 0
    async with (
        await open_log(f"file://{tmp_path}/log?fsync=never") as log,
        Bridge(
            log, endpoint=pub, replay_endpoint=replay, source=SOURCE, wire_format=wire
        ) as bridge,
        anyio.create_task_group() as tasks,
    ):
        tasks.start_soon(bridge.run)
        replicas = ReplicaSet()
        index = PrefixIndex(replicas)
        follower = Follower(log, [replicas, index])
        for step in range(steps):
            reply = await anyio.to_thread.run_sync(engine.step)
            ops[reply["op"]] += 1
            tombstones = max(tombstones, reply["tombstones"])
            await _synced(bridge, follower, replicas, reply["published"])
            for sample in reply["samples"]:
                expected = (sample["cached"], sample["usable"])
                got = _answer(index, sample["tokens"])
                kinds[sample["kind"]] += 1
                if got != expected:
                    divergences.append({"step": step, "op": reply["op"], "got": got, **sample})
        tasks.cancel_scope.cancel()
    shown = [{k: v for k, v in d.items() if k != "tokens"} for d in divergences[:5]]
    assert not divergences, f"{len(divergences)} divergences, first: {shown}"
    # The run covered what it claims: tombstones, their causes, and each kind of prompt.
    assert tombstones > 0 and ops["serve_long"] > 0 and ops["release_window"] > 0, ops
    assert kinds["window_freed"] > steps // 10, kinds
