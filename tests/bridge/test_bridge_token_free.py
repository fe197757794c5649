"""``swa-es bridge --no-token-ids`` against sglang 0.5.16's own publisher: the bridge computes our
block hashes from the engine's token ids and appends its batches without them. Two bridges on
one engine, one token-free and one not, leave logs whose followers hold exactly sglang's
blocks, with the same digests and the same prefix matches; only the token-free log is free of
token ids."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import anyio
import pytest

from consumers import Follower, ReplicaSet
from log import open_log
from swa_es.service.views import StandardViews
from tests.bridge.test_bridge_cli import start_bridge, stop, wait_for_counters
from tests.peers.sglang_venv import SglangEngine, require_sglang
from tests.swa_es.test_publisher_token_free import (
    WRITTEN_TOKENS,
    assert_token_free,
    batch_payloads,
    replica_state,
)

pytestmark = pytest.mark.sglang
SOURCE = "sg"


async def followed(log_url: str) -> tuple[StandardViews, list[bytes]]:
    """A follower's views of the log once caught up, and the log's batch records."""
    async with await open_log(log_url) as log:
        views = StandardViews.create()
        follower = Follower(log, views.all)
        await follower.catch_up()
        assert follower.metrics.divergences == 0
        return views, await batch_payloads(log)


async def prompts_of(log_url: str) -> list[list[int]]:
    """The token ids of every held block's chain, from a log that carries them."""
    async with await open_log(log_url) as log:
        replicas = ReplicaSet(keep_tokens=True)
        await Follower(log, [replicas]).catch_up()
    blocks = {block.block_hash: block for block in replicas[SOURCE].blocks()}
    prompts = []
    for block in blocks.values():
        chain: list[int] = []
        at: int | None = block.block_hash
        while at is not None:
            chain[:0] = blocks[at].token_ids or ()
            at = blocks[at].parent_block_hash
        prompts.append(chain)
    return prompts


def test_a_token_free_bridge_holds_what_a_plain_one_does(tmp_path: Path) -> None:
    require_sglang()
    pub, replay = f"ipc://{tmp_path}/kv.pub", f"ipc://{tmp_path}/kv.replay"
    plain_url, free_url = f"file://{tmp_path}/plain", f"file://{tmp_path}/free"
    engine = SglangEngine(pub, replay)
    bridges: list[tuple[subprocess.Popen[str], int]] = []
    try:
        engine.serve(20)  # before the bridges: they take it from the replay socket
        for url, extra in ((plain_url, ()), (free_url, ("--no-token-ids",))):
            bridges.append(start_bridge(pub, replay, url, "--heartbeat-s", "600", *extra))
        published = engine.serve(20, 1)
        for _, port in bridges:
            wait_for_counters(port, published)
        for bridge, _ in bridges:
            bridge.send_signal(signal.SIGTERM)
            _, err = bridge.communicate(timeout=60)
            assert bridge.returncode == 0, err
        expected = engine.blocks()
    finally:
        for bridge, _ in bridges:
            stop(bridge)
        engine.close()
    plain, plain_payloads = anyio.run(followed, plain_url)
    free, free_payloads = anyio.run(followed, free_url)
    assert_token_free(free_payloads)
    assert any(WRITTEN_TOKENS.search(payload) for payload in plain_payloads)
    state = replica_state(plain.replicas, SOURCE)
    assert replica_state(free.replicas, SOURCE) == state
    assert {block for block, _, _ in state["blocks"]} == expected  # type: ignore[attr-defined]
    prompts = anyio.run(prompts_of, plain_url)
    assert prompts
    for prompt in prompts:
        answer = free.prefix.match(prompt)
        assert answer == plain.prefix.match(prompt)
        assert answer[SOURCE].full_tokens == len(prompt)
