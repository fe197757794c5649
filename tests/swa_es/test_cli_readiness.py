"""``swa-es follow``'s ``/readyz`` with real processes over real HTTP: 503 while the follower
replays a large log (the records to go counting down), 200 within a second of catching up (and
the ``ready:`` line on stderr); then a live ``serve`` source whose stream has lost batches (a
heartbeat past its last batch: its state unknown) holds it at 503, naming the source, until that
source, killed with SIGKILL (no offline marker), is unheard past ``--source-timeout-s``: a dead
source does not hold readiness back."""

from __future__ import annotations

import asyncio
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from cache.events.liveness import encode_liveness, heartbeat
from log.file import FileLog
from swa_es.cli import EXIT_OK, main
from tests.swa_es.cli_process import CliProcess

pytestmark = pytest.mark.slow

HISTORY_REQUESTS = 8000
"""Requests (about one record each) of source a's history: a replay of a few tenths of a second."""
SOURCE_TIMEOUT_S = 3.0
WAIT_S = 30.0

Poll = tuple[float, int, dict[str, Any]]


def poll_until(
    client: httpx.Client, url: str, done: Callable[[int, dict[str, Any]], bool]
) -> list[Poll]:
    """GET ``url`` every 10 ms until ``done(status, document)``; every answer with its time."""
    polls: list[Poll] = []
    deadline = time.monotonic() + WAIT_S
    while True:
        response = client.get(url)
        polls.append((time.monotonic(), response.status_code, response.json()))
        if done(response.status_code, polls[-1][2]):
            return polls
        assert time.monotonic() < deadline, polls[-5:]
        time.sleep(0.01)


async def lose_batches(log_dir: Path, source: str, epoch: str, seq: int) -> None:
    """Append, as the log's writer now, a heartbeat of ``source`` naming ``seq`` of ``epoch``:
    batches up to it are missing, a gap."""
    async with await FileLog.open(log_dir) as log:
        await log.append(source, encode_liveness(heartbeat(source, epoch, seq)))


async def records_in(log_dir: Path) -> int:
    """How many records the log holds (its batches, the epoch start and liveness records)."""
    async with await FileLog.open(log_dir) as log:
        return (await log.end()).get(0)


def test_readyz_through_a_replay_a_source_with_a_gap_and_its_death(tmp_path: Path) -> None:
    """The whole recovery of a follower as a router sees it at /readyz."""
    log_dir = tmp_path / "log"
    history = ["serve", "--log", str(log_dir), "--source", "a", "--window", "64"]
    assert main([*history, "--requests", str(HISTORY_REQUESTS)]) == EXIT_OK
    history_records = asyncio.run(records_in(log_dir))
    follow = CliProcess(
        "follow", "--log", str(log_dir), "--http-port", "0",
        "--source-timeout-s", str(SOURCE_TIMEOUT_S),
    )  # fmt: skip
    source_b: CliProcess | None = None
    try:
        start = follow.wait_for_line(lambda line: "routing API on" in line)
        found = re.search(r"routing API on (http://[0-9.:]+)", start)
        assert found is not None, start
        readyz = found.group(1) + "/readyz"
        with httpx.Client(timeout=10) as client:
            # 1. the replay: 503 until restored and caught up, then 200 at once
            polls = poll_until(client, readyz, lambda status, _: status == 200)
            waiting = [(at, doc) for at, status, doc in polls if status == 503]
            assert waiting and all(doc["reason"].startswith("restoring") for _, doc in waiting)
            replaying = [doc for _, doc in waiting if "records to go" in doc["reason"]]
            assert replaying, waiting
            to_go = [doc["records_to_go"] for doc in replaying]
            assert to_go == sorted(to_go, reverse=True) and 0 < to_go[0] <= history_records
            ready_at, _, ready = polls[-1]
            assert ready_at - waiting[-1][0] < 1.0, "200 more than a second after the last 503"
            assert ready["records_to_go"] == 0 and ready["sources"]["offline"] == ["a"], ready
            line = follow.wait_for_line(lambda line: line.startswith("swa-es follow: ready: "))
            assert f"from position 0:{HISTORY_REQUESTS + 2}" in line, line
            assert "no live source to wait for; offline: a" in line, line

            # 2. a live source: caught up, so ready with it
            source_b = CliProcess(
                "serve", "--log", str(log_dir), "--source", "b", "--window", "64",
                "--rate", "50", "--heartbeat-s", "0.5",
            )  # fmt: skip
            poll_until(
                client, readyz, lambda status, doc: status == 200 and doc["sources"]["live"] == 1
            )
            sources = client.get(found.group(1) + "/v1/sources").json()["sources"]
            epoch = sources["b"]["epoch"]

            # 3. b is killed (no offline marker) and batches of it were lost: waited for...
            source_b.process.send_signal(signal.SIGKILL)
            source_b.process.wait(timeout=30)
            asyncio.run(lose_batches(log_dir, "b", epoch, sources["b"]["seq"] + 10_000))
            gap = poll_until(client, readyz, lambda status, _: status == 503)
            assert gap[-1][2]["reason"].startswith("waiting for sources: b (0 of 1 live"), gap[-1]
            assert gap[-1][2]["sources"]["waiting"]["b"].startswith("unknown: seq gap in epoch")
            # ... until it is unheard past --source-timeout-s: offline, left out, ready again
            back = poll_until(client, readyz, lambda status, _: status == 200)
            assert all(status == 503 for _, status, _ in back[:-1])
            assert back[-1][2]["sources"]["offline"] == ["a", "b"], back[-1]
            assert back[-1][0] - gap[-1][0] < SOURCE_TIMEOUT_S + 2.0
        follow.wait_for_line(lambda line: line.startswith("swa-es follow: ready again: "))
        assert follow.stop(signal.SIGTERM) == EXIT_OK, follow.text()
    finally:
        follow.kill()
        if source_b is not None:
            source_b.kill()
    text = follow.text()
    assert f"swa-es follow: restore: replaying {HISTORY_REQUESTS + 2} records" in text, text
    assert "swa-es follow: not ready: waiting for sources: b" in text, text
