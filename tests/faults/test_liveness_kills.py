"""A router never trusts a dead worker: real ``swa-es serve`` and ``swa-es follow --http-port``
processes on one FileLog.

- an idle primary that only heartbeats stays ``exact`` well past ``--source-timeout-s``;
- ``kill -9`` of a busy primary: its source turns ``offline`` in ``/v1/match`` (null lengths)
  and ``/v1/sources`` within the timeout (polled, with no bound tighter than the timeout plus
  the time it takes to poll);
- a clean stop (SIGTERM) marks the source offline at once, by its own marker;
- a restarted primary is ``exact`` again in a new epoch;
- heartbeats of an unknown epoch or out of order, appended to the log by hand, are skipped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from cache.events import BlockStored, decode_batch
from cache.events.liveness import encode_liveness, heartbeat, is_liveness
from log import open_log
from tests.compose.services import STARTUP_TIMEOUT_S, Service, follow_service, serve_service

SOURCE_TIMEOUT_S = 4.0
HEARTBEAT_S = 0.5
POLL_SLACK_S = 10.0
"""What polling may add to a bound (a status file every 0.2 s, HTTP on a loaded machine)."""


def http_base(follower: Service) -> str:
    status = follower.wait_for("http", lambda s: bool(s["restored"] and s["http_port"]), 120)
    return f"http://127.0.0.1:{status['http_port']}"


def poll(what: str, probe: Callable[[], Any], timeout_s: float) -> Any:
    """``probe()`` until it returns something truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"no {what} within {timeout_s} s")


def sources(base: str) -> dict[str, Any]:
    reply = httpx.get(f"{base}/v1/sources", timeout=10)
    assert reply.status_code == 200, reply.text
    return dict(reply.json()["sources"])


def match(base: str, prompt: list[int]) -> dict[str, Any]:
    reply = httpx.post(f"{base}/v1/match", json={"token_ids": prompt}, timeout=10)
    assert reply.status_code == 200, reply.text
    return dict(reply.json()["sources"])


def in_state(base: str, source: str, state: str) -> dict[str, Any] | None:
    found = sources(base).get(source)
    return found if found is not None and found["state"] == state else None


async def held_prompt(log_url: str) -> list[int]:
    """The tokens of the first page stored at the root in the log (a prompt a source holds
    as long as it does not evict it); empty while none is."""
    async with await open_log(log_url, readonly=True) as log:
        async for record in log.read():
            if is_liveness(record.payload):
                continue
            for event in decode_batch(record.payload).events:
                if isinstance(event, BlockStored) and event.parent_block_hash is None:
                    return list(event.token_ids)
    raise AssertionError("no block stored at the root")


async def append_stale_heartbeats(log_url: str, source: str, epoch: str, seq: int) -> None:
    """Heartbeats the follower must skip: an unknown epoch, and one from before its cursor."""
    async with await open_log(log_url) as log:
        for record in (heartbeat(source, "no-such-epoch", seq), heartbeat(source, epoch, seq - 1)):
            await log.append(source, encode_liveness(record))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_killed_primary_turns_offline_within_the_source_timeout(tmp_path: Path) -> None:
    """kill -9, restart, idle heartbeats and a clean stop of a real primary (a FileLog has one
    writer at a time), seen through a real follower."""
    log_url = (tmp_path / "log").as_uri()
    timing = ("--heartbeat-s", str(HEARTBEAT_S))
    primary = serve_service(tmp_path, log_url, "w0", "--rate", "50", *timing).start()
    follower = follow_service(
        tmp_path,
        log_url,
        "router",
        *("--http-port", "0", "--source-timeout-s", str(SOURCE_TIMEOUT_S)),
    ).start()
    try:
        base = http_base(follower)
        before = poll("w0 exact", lambda: in_state(base, "w0", "exact"), STARTUP_TIMEOUT_S)
        # exact may come from a heartbeat alone, before any block is in the log
        primary.wait_for("blocks published", lambda s: s["requests"] > 20, STARTUP_TIMEOUT_S)
        prompt = poll(
            "a block stored at the root", lambda: anyio.run(held_prompt, log_url), STARTUP_TIMEOUT_S
        )
        held = match(base, prompt).get("w0")  # absent only if the primary evicted it already
        assert held is None or (held["state"] == "exact" and held["cached_tokens"]), held
        primary.kill()
        killed_at = time.monotonic()
        gone = poll(
            "the killed primary offline",
            lambda: in_state(base, "w0", "offline"),
            SOURCE_TIMEOUT_S + POLL_SLACK_S,
        )
        assert time.monotonic() - killed_at < SOURCE_TIMEOUT_S + POLL_SLACK_S
        assert "unheard for" in gone["offline"] and gone["last_heard_s"] > SOURCE_TIMEOUT_S
        assert gone["blocks"] > 0, "the replica is kept; only the answers change"
        answer = match(base, prompt)["w0"]
        assert answer["state"] == "offline"
        assert answer["cached_tokens"] is None and answer["usable_tokens"] is None
        assert answer["last_heard_s"] > SOURCE_TIMEOUT_S

        # restarted, now idle (one request, then heartbeats only): a new epoch, exact again,
        # and still exact after twice the timeout without a batch
        primary = serve_service(tmp_path, log_url, "w0", "--rate", "0.01", *timing).start()
        # its one request served (the next is due 100 s later) and applied by the follower:
        # from here on the primary only heartbeats
        primary.wait_for("its request served", lambda s: s["requests"] >= 1, STARTUP_TIMEOUT_S)

        def caught_up() -> dict[str, Any] | None:
            found = in_state(base, "w0", "exact")
            status = primary.status()
            if found is None or status is None:
                return None
            return found if found["digest"] == status["digest"] else None

        back = poll("the restarted primary exact and caught up", caught_up, 120)
        assert back["epoch"] != before["epoch"]
        beats = follower.status()["metrics"]["heartbeats_read"]  # type: ignore[index]
        follower.wait_for(
            "heartbeats over twice the timeout",
            lambda s: s["metrics"]["heartbeats_read"] >= beats + 2 * SOURCE_TIMEOUT_S / HEARTBEAT_S,
            STARTUP_TIMEOUT_S,
        )
        idle = sources(base)["w0"]
        assert idle["state"] == "exact" and idle["last_heard_s"] < SOURCE_TIMEOUT_S
        assert idle["epoch"] == back["epoch"] and idle["seq"] == back["seq"]
        assert "w0" not in match(base, [7] * 64), "nothing of it held, and online: absent"

        # a clean stop: offline at once, by the primary's own marker
        assert primary.stop() == 0, primary.stderr_tail()
        stopped = poll("the stopped primary offline", lambda: in_state(base, "w0", "offline"), 30)
        assert stopped["offline"] == "offline marker: stopped"
        assert stopped["last_heard_s"] < SOURCE_TIMEOUT_S

        # no writer left: heartbeats of an unknown epoch and out of order are skipped
        skipped = follower.status()["metrics"]["liveness_stale_skipped"]  # type: ignore[index]
        anyio.run(append_stale_heartbeats, log_url, "w0", stopped["epoch"], stopped["seq"])
        follower.wait_for(
            "two stale heartbeats skipped",
            lambda s: s["metrics"]["liveness_stale_skipped"] == skipped + 2,
            30,
        )
        after = sources(base)["w0"]
        assert after["state"] == "offline" and after["offline"] == "offline marker: stopped"
        assert follower.status()["metrics"]["divergences"] == 0  # type: ignore[index]
        assert follower.stop() == 0, follower.stderr_tail()
    finally:
        primary.close()
        follower.close()
