"""An sglang SWA engine answering usable prefixes, as a user runs it: sglang 0.5.16's own
``SWARadixCache`` with ``swa_es.integrations.sglang`` installed, publishing through its own
``ZmqEventPublisher``, a ``swa-es bridge`` process and a ``swa-es follow`` process whose routing
API answers ``usable_tokens`` as sglang's own ``match_prefix`` does."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.bridge.test_bridge_cli import start_bridge, stop, wait_for_counters
from tests.compose.services import follow_service
from tests.peers.sglang_swa_peer import SglangSwaEngine
from tests.peers.sglang_venv import require_sglang

pytestmark = pytest.mark.sglang

STEPS = 150
CASE = {"page_size": 1, "window": 8, "full_size": 768, "swa_size": 320, "max_tokens": 192}


def answers(base: str, samples: list[dict[str, Any]]) -> list[tuple[Any, Any]]:
    """``(cached_tokens, usable_tokens)`` of the bridged source for each sample's prompt."""
    out = []
    for sample in samples:
        body = {"token_ids": sample["tokens"], "extra_key": None}
        found = httpx.post(f"{base}/v1/match", json=body, timeout=10).json()["sources"]
        held = found.get("sg", {"cached_tokens": 0, "usable_tokens": 0})
        out.append((held["cached_tokens"], held["usable_tokens"]))
    return out


def test_bridged_sglang_swa_engine_answers_usable_prefixes(tmp_path: Path) -> None:
    """After a serving run with SWA pressure, /v1/sources says the source reports residency
    and /v1/match answers each sampled prompt (window freed ones included) as sglang does."""
    require_sglang()
    pub, replay = f"ipc://{tmp_path}/kv.pub", f"ipc://{tmp_path}/kv.replay"
    log_url = f"file://{tmp_path}/log"
    engine = SglangSwaEngine()
    bridge: subprocess.Popen[str] | None = None
    try:
        engine.start(**CASE, seed=21, endpoint=pub, replay_endpoint=replay)
        bridge, port = start_bridge(pub, replay, log_url)
        reply: dict[str, Any] = {}
        for _ in range(STEPS):
            reply = engine.step()
        wait_for_counters(port, reply["published"])
        samples = reply["samples"]
        assert any(s["usable"] < s["cached"] for s in samples) or reply["tombstones"] > 0
        follow = follow_service(tmp_path, log_url, "router", "--http-port", "0").start()
        try:
            status = follow.wait_for("restore", lambda s: s["restored"] and s["http_port"], 60)
            base = f"http://127.0.0.1:{status['http_port']}"
            expected = [(s["cached"], s["usable"]) for s in samples]
            deadline = time.monotonic() + 60
            while (got := answers(base, samples)) != expected and time.monotonic() < deadline:
                time.sleep(0.1)
            assert got == expected
            source = httpx.get(f"{base}/v1/sources", timeout=10).json()["sources"]["sg"]
            assert source["swa_events"] is True
            assert source["swa_residency"] == "events"
            assert follow.stop() == 0, follow.stderr_tail()
        finally:
            follow.close()
        bridge.send_signal(signal.SIGTERM)
        _, err = bridge.communicate(timeout=60)
        assert bridge.returncode == 0, err
    finally:
        stop(bridge)
        engine.close()
