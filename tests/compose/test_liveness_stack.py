"""Liveness scenarios of the running compose stack (``bash tools/compose.sh test``): a router
never trusts a dead worker.

- a primary container paused (``docker pause``) past the followers' source timeout: both
  followers answer it offline, then exact again after ``docker unpause``, digests equal;
- (``SWA_ES_COMPOSE_SGLANG=1``) sglang's engine container killed and not restarted: both
  followers answer its source offline once the bridge's engine timeout passed, ``/v1/match``
  stops offering it; restarted: a new epoch holding exactly the engine's tree;
- (``SWA_ES_COMPOSE_SGLANG=1``) the bridge container killed and restarted while the engine
  runs: nothing lost (the new bridge run rebuilds from the engine's replay).

The services run with their defaults: ``--heartbeat-s 5``, ``--engine-timeout-s 10``,
``--source-timeout-s 15``. Like the other stack scenarios they skip outside the stack (and fail
under ``SWA_ES_REQUIRE_COMPOSE=1``).
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from tests.compose import stack
from tests.compose.test_stack import both_followers_converge, holds_both, running_stack

pytestmark = [pytest.mark.compose, pytest.mark.timeout(900)]

__all__ = ["running_stack"]  # the module fixture: skip (or fail) without the stack

SOURCE_TIMEOUT_S = 15.0
ENGINE_TIMEOUT_S = 10.0
SLACK_S = 60.0
"""What a poll over ``docker exec`` may add to a bound on a loaded machine."""
SGLANG_SOURCE = "sglang-0"
PROMPT = {"token_ids": list(range(1, 65))}


def answer(follower: str, source: str) -> dict[str, Any] | None:
    """``source``'s answer to a prompt in ``follower``'s /v1/match (None: not listed)."""
    found: dict[str, Any] | None = stack.http_in(follower, "/v1/match", PROMPT)["sources"].get(
        source
    )
    return found


def in_state(follower: str, source: str, state: str) -> dict[str, Any] | None:
    """``source`` in ``follower``'s /v1/sources once in ``state``."""
    found = stack.sources(follower).get(source)
    return found if found is not None and found["state"] == state else None


def offline_everywhere(source: str, reason: str, timeout_s: float) -> None:
    """Both followers answer ``source`` offline (``reason`` in why), in /v1/sources and with
    null lengths in /v1/match."""
    for follower in stack.FOLLOWERS:
        gone = stack.wait_for(
            f"{follower} answering {source} offline",
            functools.partial(in_state, follower, source, "offline"),
            timeout_s,
        )
        assert reason in gone["offline"], (follower, gone)
        found = answer(follower, source)
        assert found is not None and found["state"] == "offline", (follower, found)
        assert found["cached_tokens"] is None and found["usable_tokens"] is None, found


def test_primary_paused_past_the_timeout_is_offline_then_exact_again() -> None:
    """docker pause of primary-0 for longer than the source timeout: offline on both followers
    (worker-1 stays exact); unpaused, the same epoch is exact again and the digests converge."""
    stack.start_primaries()
    for follower in stack.FOLLOWERS:
        stack.wait_for(f"{follower} holding both sources", functools.partial(holds_both, follower))
    before = stack.sources(stack.FOLLOWERS[0])["worker-0"]
    cid = stack.container("primary-0")
    stack.run("docker", "pause", cid)
    try:
        offline_everywhere("worker-0", "unheard for", SOURCE_TIMEOUT_S + SLACK_S)
        for follower in stack.FOLLOWERS:
            assert stack.sources(follower)["worker-1"]["state"] == "exact", follower
    finally:
        stack.run("docker", "unpause", cid)
    for follower in stack.FOLLOWERS:
        back = stack.wait_for(
            f"{follower} answering worker-0 exact again",
            functools.partial(in_state, follower, "worker-0", "exact"),
        )
        assert back["epoch"] == before["epoch"], "a paused primary resumes its epoch"
    finals = stack.stop_primaries()
    both_followers_converge(finals)
    print(
        f"scenario pause: worker-0 paused past the {SOURCE_TIMEOUT_S:.0f} s source timeout, "
        f"offline on both followers, exact again in epoch {before['epoch']} after unpause; "
        "digests equal"
    )


def start_bridge() -> None:
    stack.compose("--profile", "sglang", "up", "-d", "--no-build", "--no-recreate", "--wait",
                  "--wait-timeout", "240", "bridge", timeout_s=300)  # fmt: skip


def stop_bridge() -> None:
    stack.compose("--profile", "sglang", "stop", "--timeout", "60", "bridge")


def engine_container_gone() -> bool | None:
    """True once no container of sglang's name is left (its name is free for a new one)."""
    listed = stack.run("docker", "ps", "-aq", "--filter", f"name=^{stack.SGLANG_CONTAINER}$")
    return True if not listed.strip() else None


def holds_tree(follower: str, blocks: int, epoch_not: str | None = None) -> dict[str, Any] | None:
    """The sglang source in ``follower``'s /v1/sources once exact with ``blocks`` blocks (in an
    epoch other than ``epoch_not``)."""
    found = in_state(follower, SGLANG_SOURCE, "exact")
    if found is None or found["blocks"] != blocks or found["epoch"] == epoch_not:
        return None
    return found


def test_sglang_engine_killed_offline_then_restarted_new_epoch() -> None:
    """sglang's container killed (SIGKILL) and not restarted: offline on both followers by the
    bridge's marker, /v1/match stops offering it; a new engine container on the same name: a
    new epoch holding exactly its tree."""
    engine = stack.SglangContainer()
    try:
        start_bridge()
        engine.serve(40, seed=0)
        blocks = len(engine.blocks())
        first = {
            follower: stack.wait_for(
                f"{follower} holding sglang's tree", functools.partial(holds_tree, follower, blocks)
            )
            for follower in stack.FOLLOWERS
        }
        stack.run("docker", "kill", stack.SGLANG_CONTAINER)
        engine.process.wait(timeout=60)
        stack.wait_for("the killed engine's container removed (--rm)", engine_container_gone)
        offline_everywhere(
            SGLANG_SOURCE, "offline marker: engine unheard", ENGINE_TIMEOUT_S + SLACK_S
        )
        engine = stack.SglangContainer()
        engine.serve(30, seed=1)
        blocks = len(engine.blocks())
        for follower in stack.FOLLOWERS:
            again = stack.wait_for(
                f"{follower} holding the new run's tree",
                functools.partial(holds_tree, follower, blocks, first[follower]["epoch"]),
            )
            assert again["diverged"] is None, again
    finally:
        engine.close()
        stop_bridge()
    print(
        f"scenario engine kill: sglang killed, offline on both followers; restarted, a new "
        f"epoch holding its {blocks} blocks"
    )


def test_bridge_killed_and_restarted_loses_nothing() -> None:
    """The bridge container killed while sglang keeps serving, then started again: the new
    bridge run rebuilds from sglang's replay; both followers hold exactly sglang's tree."""
    engine = stack.SglangContainer()
    try:
        start_bridge()
        engine.serve(30, seed=0)
        stack.wait_for(
            "the bridge's source on follower-a",
            lambda: in_state(stack.FOLLOWERS[0], SGLANG_SOURCE, "exact"),
        )
        stack.run("docker", "kill", stack.container("bridge"))
        engine.serve(20, seed=1)  # while no bridge runs: only the engine's replay keeps it
        start_bridge()
        engine.serve(20, seed=2)
        blocks = len(engine.blocks())
        for follower in stack.FOLLOWERS:
            found = stack.wait_for(
                f"{follower} holding sglang's tree", functools.partial(holds_tree, follower, blocks)
            )
            assert found["diverged"] is None, found
    finally:
        engine.close()
        stop_bridge()
    print(f"scenario bridge kill: restarted bridge rebuilt sglang's {blocks} blocks on both")
