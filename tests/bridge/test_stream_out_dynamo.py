"""NVIDIA Dynamo's standalone KV indexer (ai-dynamo-runtime 1.6.1, its own code in
bench/.venv-dynamo) subscribed to ``swa-es follow --zmq-publish ... --zmq-format vllm`` holds
what the follower holds: for sampled prompts its ``/query`` agrees with our ``/v1/match``, from
a follower started on a log with history, after the indexer restarts, and after the follower
restarts (Dynamo's documented step for a restarted publisher: ``/unregister``, ``/register``).

Dynamo registers the worker with our replay endpoint: its first live batch is above seq 0, so
it asks for the run from seq 0, which starts with the follower's state."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.bridge.stream_out_workload import (
    PAGE,
    Workload,
    append,
    ours,
    start_follower,
    stream_out_follower,
)
from tests.compose.services import Service
from tests.peers.dynamo_indexer import DynamoIndexer, require_dynamo

pytestmark = pytest.mark.dynamo

SOURCE = "worker-0"
WORKER = 0  # Dynamo's instance id for SOURCE
AGREE_TIMEOUT_S = 60.0


def theirs(dynamo: DynamoIndexer, prompts: list[list[int]]) -> list[int]:
    """Dynamo's matched device-tier tokens of WORKER for each prompt."""
    return [dynamo.matched(prompt).get(WORKER, 0) for prompt in prompts]


def assert_agree(
    follow: Service, dynamo: DynamoIndexer, workload: Workload, end: int, base: str
) -> None:
    """Once the follower has applied the log up to ``end``, Dynamo comes to answer every
    sampled prompt as ``/v1/match`` does (the stream is asynchronous: wait for it, then
    compare)."""
    follow.wait_for("applied", lambda s: s["position"].get("0") == end, 60)
    prompts = workload.samples(60)
    expected = ours(base, SOURCE, prompts)
    assert any(expected), "the samples hit nothing: the workload is wrong"
    deadline = time.monotonic() + AGREE_TIMEOUT_S
    while (got := theirs(dynamo, prompts)) != expected and time.monotonic() < deadline:
        time.sleep(0.3)
    differ = [(i, e, g) for i, (e, g) in enumerate(zip(expected, got, strict=True)) if e != g]
    assert not differ, f"(prompt, ours, Dynamo's) differ: {differ[:10]}\n{dynamo.log_tail()}"


def test_dynamo_indexer_holds_what_the_follower_holds(tmp_path: Path) -> None:
    require_dynamo()
    setup = stream_out_follower(tmp_path, SOURCE, 7, "vllm", "--zmq-replay")
    log_url, workload, follow = setup.log_url, setup.workload, setup.follow
    pub, replay = setup.endpoints
    dynamo: DynamoIndexer | None = None
    try:
        base = start_follower(follow)
        dynamo = DynamoIndexer(tmp_path)
        dynamo.register(WORKER, pub, replay, PAGE)
        end = append(log_url, workload.batches(20))  # live traffic
        assert_agree(follow, dynamo, workload, end, base)

        dynamo.close()  # the indexer restarts: a fresh one replays the run from seq 0
        dynamo = DynamoIndexer(tmp_path)
        dynamo.register(WORKER, pub, replay, PAGE)
        end = append(log_url, workload.batches(20))
        assert_agree(follow, dynamo, workload, end, base)

        assert follow.stop() == 0, follow.stderr_tail()  # the follower restarts: a new run
        base = start_follower(follow)
        dynamo.unregister(WORKER)
        dynamo.register(WORKER, pub, replay, PAGE)
        end = append(log_url, workload.batches(20))
        assert_agree(follow, dynamo, workload, end, base)
    finally:
        if dynamo is not None:
            dynamo.close()
        follow.close()


def test_dynamo_reads_the_full_attention_group_of_a_hybrid_stream(tmp_path: Path) -> None:
    """With ``--zmq-tombstones groups`` the stream is a vLLM hybrid model's (a full-attention
    and a sliding-window group): Dynamo, which keeps the full-attention group only, still holds
    what the follower holds."""
    require_dynamo()
    setup = stream_out_follower(
        tmp_path, SOURCE, 9, "vllm", "--zmq-replay", "--zmq-tombstones", "groups"
    )
    pub, replay = setup.endpoints
    dynamo: DynamoIndexer | None = None
    try:
        base = start_follower(setup.follow)
        dynamo = DynamoIndexer(tmp_path)
        dynamo.register(WORKER, pub, replay, PAGE)
        end = append(setup.log_url, setup.workload.batches(30))
        assert_agree(setup.follow, dynamo, setup.workload, end, base)
    finally:
        if dynamo is not None:
            dynamo.close()
        setup.follow.close()
