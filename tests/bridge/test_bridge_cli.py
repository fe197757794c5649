"""``swa-es bridge`` as a process, against sglang 0.5.16's own publisher: ``/metrics`` counts
over HTTP, SIGTERM flushes and exits 0, and the routing API over HTTP then answers the bridged
source with its SWA-usable length unknown."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from consumers import Follower
from log import open_log
from swa_es.service.http_app import AppParts, HttpServer, build_app
from swa_es.service.routing import FollowerRouting
from swa_es.service.service_metrics import registry_of
from swa_es.service.views import StandardViews
from tests.peers.sglang_venv import ROOT, SglangEngine, require_sglang

pytestmark = pytest.mark.sglang

COUNTERS = ("received", "replayed", "gaps", "epochs", "undecodable")


def bridge_counters(port: int) -> dict[str, float]:
    """The ``swa_es_bridge_*`` samples at ``/metrics``, by counter name."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    counters: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("swa_es_bridge_") and sample.labels.get("source") == "sg":
                name = sample.name.removeprefix("swa_es_bridge_").removesuffix("_total")
                counters[name] = sample.value
    return counters


def wait_for_counters(port: int, published: int, timeout_s: float = 60.0) -> dict[str, float]:
    deadline = time.monotonic() + timeout_s
    while True:
        counters = bridge_counters(port)
        if counters.get("batches_applied") == published:
            return counters
        if time.monotonic() > deadline:
            raise TimeoutError(f"bridge applied fewer than {published} batches: {counters}")
        time.sleep(0.1)


def test_bridge_process_metrics_sigterm_and_routing(tmp_path: Path) -> None:
    """The bridge process counts what it received and replayed, exits 0 on SIGTERM with every
    batch flushed, and /v1/match then reports the bridged source exact, usable unknown."""
    require_sglang()
    pub, replay = f"ipc://{tmp_path}/kv.pub", f"ipc://{tmp_path}/kv.replay"
    log_url = f"file://{tmp_path}/log"
    engine = SglangEngine(pub, replay)
    bridge: subprocess.Popen[str] | None = None
    try:
        before = engine.serve(30)
        command = [sys.executable, "-m", "swa_es.cli", "bridge", "--zmq", pub, "--replay", replay]
        command += ["--format", "sglang", "--source", "sg", "--log", log_url]
        bridge = subprocess.Popen(
            [*command, "--metrics-port", "0"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert bridge.stdout is not None
        banner = bridge.stdout.readline()
        assert "metrics on port" in banner, (banner, bridge.stderr and bridge.stderr.read())
        port = int(banner.rsplit(" ", 1)[1])
        published = engine.serve(30, 1)
        counters = wait_for_counters(port, published)
        assert set(COUNTERS) <= set(counters), counters
        assert counters["replayed"] >= before
        assert counters["received"] + counters["replayed"] >= published
        assert counters["epochs"] == 1 and counters["undecodable"] == 0
        bridge.send_signal(signal.SIGTERM)
        out, err = bridge.communicate(timeout=60)
        assert bridge.returncode == 0, err
        assert f"{published} applied" in out
        expected = engine.blocks()
    finally:
        if bridge is not None and bridge.poll() is None:
            bridge.kill()
            bridge.wait()
        engine.close()
    anyio.run(check_routing, log_url, expected)


async def check_routing(log_url: str, expected: set[int]) -> None:
    """The log holds exactly sglang's blocks; /v1/match over HTTP says usable unknown."""
    async with await open_log(log_url) as log:
        views = StandardViews.create()
        follower = Follower(log, views.all)
        await follower.catch_up()
        tree = views.replicas["sg"]
        assert {block.block_hash for block in tree.blocks()} == expected
        root = next(block for block in tree.blocks() if block.parent_block_hash is None)
        parts = AppParts(
            registry_of(list), lambda: (True, "ok"), routing=FollowerRouting(follower, views)
        )
        async with HttpServer(build_app(parts)) as server, httpx.AsyncClient() as client:
            base = f"http://127.0.0.1:{server.port}"
            body = {"token_ids": list(root.token_ids), "extra_key": None}
            reply = (await client.post(f"{base}/v1/match", json=body)).json()
            assert reply["sources"]["sg"] == {
                "cached_tokens": len(root.token_ids),
                "usable_tokens": None,
                "state": "exact",
            }
            sources = (await client.get(f"{base}/v1/sources")).json()["sources"]
            assert sources["sg"]["blocks"] == len(expected)
