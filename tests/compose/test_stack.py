"""The fault scenarios of the running compose stack (``bash tools/compose.sh test``).

A 3-broker Kafka cluster (topic replicated 3 times, 2 in sync required), two ``swa-es serve``
primaries and two ``swa-es follow`` replicas with the routing API, all in containers. The tests
run on the host: the Docker CLI kills, restarts and disconnects containers, ``docker exec`` /
``docker run`` ask the services inside the stack's network, and the log is read back over the
published 127.0.0.1 Kafka listeners. Each scenario ends with the primaries stopped (flushed) and
both followers at their final digests, and prints its counts.

Outside ``tools/compose.sh test`` (no ``SWA_ES_COMPOSE_STACK=1``) they skip; with
``SWA_ES_REQUIRE_COMPOSE=1`` (CI) a skip is a failure.
"""

from __future__ import annotations

import functools
import os
import time
from collections import Counter
from typing import Any

import pytest

from tests.compose import stack

pytestmark = [pytest.mark.compose, pytest.mark.timeout(900)]

DISCONNECT_S = 30.0


@pytest.fixture(scope="module", autouse=True)
def running_stack() -> None:
    """Skip unless the stack runs (fail instead under SWA_ES_REQUIRE_COMPOSE=1)."""
    if os.environ.get("SWA_ES_COMPOSE_STACK") != "1":
        reason = "the compose stack is not running: run `bash tools/compose.sh test`"
        if os.environ.get("SWA_ES_REQUIRE_COMPOSE") == "1":
            pytest.fail(f"SWA_ES_REQUIRE_COMPOSE=1 but {reason}")
        pytest.skip(reason)


def both_followers_converge(finals: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Both followers end at the primaries' final digests; their /v1/sources answers."""
    answers = {follower: stack.converged(follower, finals) for follower in stack.FOLLOWERS}
    for follower in stack.FOLLOWERS:
        metrics = stack.status(follower)
        assert metrics is not None
        assert metrics["metrics"]["divergences"] == 0, (follower, metrics["metrics"])
    return answers


def holds_both(follower: str) -> bool:
    """Whether a follower's /v1/sources lists both primaries' sources."""
    return len(stack.sources(follower)) >= 2


def acked_batches_exactly_once(finals: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Every batch a primary had acknowledged is in the log exactly once: per source, the log's
    batches of the final epoch number exactly ``batches_published`` distinct, gapless seqs."""
    counts = {}
    for source, final in finals.items():
        publisher = final["publisher"]
        assert publisher["resyncs"] == 0 and publisher["discarded_batches"] == 0, publisher
        batches = stack.log_batches(source, final["epoch"])
        seqs = Counter(int(b["seq"]) for b in batches)
        duplicated = sum(n - 1 for n in seqs.values())
        lost = publisher["batches_published"] - len(seqs)
        print(
            f"  {source}: {publisher['batches_published']} acknowledged batches, "
            f"{len(batches)} in the log, {lost} lost, {duplicated} duplicated"
        )
        assert duplicated == 0, f"{source}: {duplicated} duplicated batches"
        assert lost == 0, f"{source}: {lost} acknowledged batches missing from the log"
        assert sorted(seqs) == list(range(min(seqs), min(seqs) + len(seqs))), "a seq gap"
        counts[source] = len(seqs)
    return counts


def test_followers_replicate_both_primaries_and_answer_match() -> None:
    """Two primaries on the 3-broker cluster, two followers: the routing API answers /v1/match
    from another container while they serve (exact) and after they stopped (offline, by their
    markers), and the followers end at the primaries' final digests."""
    stack.start_primaries()
    for follower in stack.FOLLOWERS:
        stack.wait_for(f"{follower} holding both sources", functools.partial(holds_both, follower))
    url = f"http://{stack.FOLLOWERS[0]}:{stack.ROUTING_PORT}"

    def exact_match() -> tuple[list[int], dict[str, Any]] | None:
        """A prompt whose first page worker-0 holds now, by the log's own events, and the
        answer to it once exact (the primary may evict it meanwhile: then ask again)."""
        epoch = stack.status("primary-0")["epoch"]  # type: ignore[index]
        tokens = stack.live_root_block(stack.log_batches("worker-0", epoch, brief=False))
        match = stack.http_from_another_container(url + "/v1/match", {"token_ids": tokens})
        found = match["sources"].get("worker-0") or {}
        held = found.get("state") == "exact" and (found.get("cached_tokens") or 0) >= len(tokens)
        return (tokens, match) if held else None

    tokens, match = stack.wait_for("an exact /v1/match of a cached prompt", exact_match)
    finals = stack.stop_primaries()
    answers = both_followers_converge(finals)
    counts = acked_batches_exactly_once(finals)
    listed = stack.http_from_another_container(url + "/v1/sources")
    assert set(listed["sources"]) >= set(finals), listed

    def offline_answer() -> dict[str, Any] | None:
        """worker-0's answer to the same prompt once offline (stopped: its marker read)."""
        match = stack.http_from_another_container(url + "/v1/match", {"token_ids": tokens})
        found: dict[str, Any] = match["sources"]["worker-0"]
        return found if found["state"] == "offline" else None

    stopped = stack.wait_for("worker-0 offline by its marker", offline_answer)
    assert stopped["cached_tokens"] is None and stopped["usable_tokens"] is None, stopped
    assert listed["sources"]["worker-0"]["state"] in ("exact", "offline"), listed
    print(
        f"scenario converge: batches {counts}; digests "
        f"{ {s: f['digest'] for s, f in finals.items()} } on both followers; "
        f"/v1/sources from another container listed {len(listed.get('sources', listed))} "
        f"sources, /v1/match of a {len(tokens)}-token cached prompt answered {match}"
    )
    assert set(answers[stack.FOLLOWERS[0]]) >= set(finals)


def test_leader_broker_killed_and_restarted_loses_no_acknowledged_batch() -> None:
    """docker kill of the broker leading worker-0's partition mid-run, then its restart: every
    acknowledged batch is in the log exactly once and the followers converge."""
    stack.start_primaries()
    batches = stack.log_batches("worker-0", stack.status("primary-0")["epoch"])  # type: ignore[index]
    partition = int(batches[-1]["partition"])
    leader = stack.partition_leaders()[partition]
    broker = f"kafka-{leader}"
    stack.run("docker", "kill", stack.container(broker))
    # The controller fences the dead broker after its session timeout and elects a new leader;
    # the primaries keep publishing to it (2 replicas left, min ISR 2).
    new_leader = stack.wait_for(
        f"a new leader of partition {partition}",
        lambda: (now := stack.partition_leaders().get(partition, -1)) > 0 and now != leader and now,
    )
    before = stack.published("primary-0")
    stack.wait_for(
        "worker-0 publishing to the new leader", lambda: stack.published("primary-0") > before + 20
    )
    stack.start(broker)
    finals = stack.stop_primaries()
    counts = acked_batches_exactly_once(finals)
    both_followers_converge(finals)
    print(
        f"scenario broker kill: killed {broker} (leader of partition {partition}), "
        f"new leader kafka-{new_leader}, restarted; batches exactly once {counts}"
    )


def test_follower_cut_off_the_network_catches_up() -> None:
    """follower-b off the network for 30 s: meanwhile its /v1/sources stays behind follower-a's;
    reconnected, it catches up to the final digests."""
    stack.start_primaries()
    follower = stack.FOLLOWERS[1]
    cid = stack.container(follower)
    stack.run("docker", "network", "disconnect", stack.NETWORK, cid)
    try:
        cut_at = time.monotonic()
        frozen = stack.sources(follower)["worker-0"]["seq"]
        time.sleep(5.0)
        stack.wait_for(
            "follower-a moving past the cut-off follower",
            lambda: stack.sources(stack.FOLLOWERS[0])["worker-0"]["seq"] > frozen + 20,
        )
        during = stack.sources(follower)["worker-0"]
        ahead = stack.sources(stack.FOLLOWERS[0])["worker-0"]
        assert during["seq"] < ahead["seq"], (during, ahead)
        time.sleep(max(0.0, DISCONNECT_S - (time.monotonic() - cut_at)))
    finally:
        stack.run("docker", "network", "connect", stack.NETWORK, cid)
    finals = stack.stop_primaries()
    both_followers_converge(finals)
    print(
        f"scenario network cut: {follower} off for {DISCONNECT_S:.0f} s at worker-0 seq "
        f"{during['seq']} while follower-a was at {ahead['seq']} "
        f"(lag {ahead['seq'] - during['seq']} batches); caught up to final seq "
        f"{stack.sources(follower)['worker-0']['seq']}, digests equal"
    )


def test_follower_killed_restores_from_its_snapshot_and_the_tail() -> None:
    """docker kill of follower-a, restart with its volume: it restores its newest snapshot, reads
    only the tail after it, and converges."""
    stack.start_primaries()
    follower = stack.FOLLOWERS[0]
    stack.wait_for(
        f"a snapshot of {follower}",
        lambda: stack.status(follower)["metrics"]["snapshots_written"] >= 1,  # type: ignore[index]
    )
    stack.run("docker", "kill", stack.container(follower))
    time.sleep(5.0)  # the primaries publish on while it is down
    stack.start(follower)
    finals = stack.stop_primaries()
    both_followers_converge(finals)
    after = stack.status(follower)
    assert after is not None
    metrics = after["metrics"]
    assert metrics["restored_generation"] is not None, metrics
    total = sum(len(stack.log_batches(s, f["epoch"])) for s, f in finals.items())
    print(
        f"scenario follower kill: restored snapshot generation {metrics['restored_generation']}, "
        f"then applied {metrics['batches_applied']} batches of the tail "
        f"(the primaries' final epochs hold {total}); digests equal"
    )
    assert 0 < metrics["batches_applied"] < total


def test_bridge_appends_sglangs_own_kv_events() -> None:
    """sglang 0.5.16's own ZmqEventPublisher in its container, ``swa-es bridge`` in another:
    the bridge applies every batch sglang published (those before it came from sglang's replay
    socket), appends its source's batches once each with no seq gap, and both followers end
    holding exactly as many blocks as sglang's tree, the source offline by the marker the
    bridge appends when it stops."""
    source = "sglang-0"
    label = f'{{source="{source}"}}'
    engine = stack.SglangContainer()
    try:
        before = engine.serve(60, seed=0)
        stack.compose("--profile", "sglang", "up", "-d", "--no-build", "--no-recreate", "--wait",
                      "--wait-timeout", "240", "bridge", timeout_s=300)  # fmt: skip
        published = engine.serve(60, seed=1)
        blocks = engine.blocks()
        assert blocks, "sglang's tree holds nothing"

        def bridge_done() -> dict[str, float] | None:
            """The bridge's samples once it applied every batch sglang published."""
            now = stack.metrics_in("bridge")
            return now if now[f"swa_es_bridge_batches_applied_total{label}"] >= published else None

        bridge = stack.wait_for(f"the bridge applying sglang's {published} batches", bridge_done)
        assert bridge[f"swa_es_bridge_unfilled_gaps_total{label}"] == 0, bridge
        stack.compose("--profile", "sglang", "stop", "--timeout", "60", "bridge")
    finally:
        engine.close()
    epochs = {b["epoch"] for b in stack.log_batches(source, epoch=None)}
    assert len(epochs) == 1, epochs
    batches = stack.log_batches(source, epochs.pop())
    seqs = Counter(int(b["seq"]) for b in batches)
    assert all(n == 1 for n in seqs.values()), "a batch appended twice"
    assert sorted(seqs) == list(range(len(seqs))), "a seq gap in the bridge's batches"

    def holds_sglangs_tree(follower: str) -> dict[str, Any] | None:
        """The follower's view of the source once it applied the bridge's last batch."""
        replica = stack.sources(follower).get(source)
        if replica is None or replica["seq"] != max(seqs) or replica["state"] != "offline":
            return None
        return replica

    for follower in stack.FOLLOWERS:
        replica = stack.wait_for(
            f"{follower} at the bridge's last batch",
            functools.partial(holds_sglangs_tree, follower),
        )
        assert replica["offline"] == "offline marker: the bridge stopped", (follower, replica)
        assert replica["diverged"] is None, (follower, replica)
        assert replica["blocks"] == len(blocks), (follower, replica, len(blocks))
    print(
        f"scenario sglang bridge: sglang published {published} batches ({before} before the "
        f"bridge came), the bridge applied them all and appended {len(seqs)} (seqs 0..{max(seqs)},"
        f" once each); both followers hold sglang's {len(blocks)} blocks"
    )
