"""``swa-es bridge`` and ``swa-es follow`` as processes (docs/design.md §8's command lines), against
sglang 0.5.16's own publisher: the bridge's ``/metrics`` counts over HTTP, SIGTERM flushes and
exits 0, a SIGKILLed bridge restarted loses nothing; the follower's routing API over HTTP
answers the bridged source with its SWA-usable length unknown, and its ZMQ stream out replays
the log to sglang's own decoder."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from consumers import Follower, PrefixIndex, ReplicaSet
from log import open_log
from tests.compose.services import follow_service
from tests.peers.sglang_venv import ROOT, SGLANG_PYTHON, SglangEngine, require_sglang

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


def start_bridge(
    pub: str, replay: str, log_url: str, *extra: str
) -> tuple[subprocess.Popen[str], int]:
    """A ``swa-es bridge`` process (``extra`` flags added) and its metrics port."""
    command = [sys.executable, "-m", "swa_es.cli", "bridge", "--zmq", pub, "--replay", replay]
    command += ["--format", "sglang", "--source", "sg", "--log", log_url, *extra]
    bridge = subprocess.Popen(
        [*command, "--metrics-port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert bridge.stdout is not None
    banner = bridge.stdout.readline()
    if "metrics on port" not in banner:
        bridge.kill()
        raise AssertionError(f"bridge did not start: {banner!r} {bridge.communicate()[1]}")
    return bridge, int(banner.rsplit(" ", 1)[1])


def stop(bridge: subprocess.Popen[str] | None) -> None:
    if bridge is not None and bridge.poll() is None:
        bridge.kill()
        bridge.wait()


async def replica_blocks(log_url: str) -> set[int]:
    async with await open_log(log_url) as log:
        replicas = ReplicaSet()
        await Follower(log, [replicas]).catch_up()
        assert replicas["sg"].diverged is None
        return {block.block_hash for block in replicas["sg"].blocks()}


def test_bridge_process_metrics_sigterm_and_routing(tmp_path: Path) -> None:
    """The bridge process counts what it received and replayed, exits 0 on SIGTERM with every
    batch flushed and the source marked offline, which /v1/match then reports."""
    require_sglang()
    pub, replay = f"ipc://{tmp_path}/kv.pub", f"ipc://{tmp_path}/kv.replay"
    log_url = f"file://{tmp_path}/log"
    engine = SglangEngine(pub, replay)
    bridge: subprocess.Popen[str] | None = None
    try:
        before = engine.serve(30)
        # no heartbeat between the batches: the stream out below numbers records by log offset
        bridge, port = start_bridge(pub, replay, log_url, "--heartbeat-s", "600")
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
        stop(bridge)
        engine.close()
    assert anyio.run(replica_blocks, log_url) == expected
    check_follow_process(tmp_path, log_url, len(expected))


def check_follow_process(tmp_path: Path, log_url: str, blocks: int) -> None:
    """``swa-es follow --http-port --zmq-publish --zmq-replay --zmq-format sglang`` on the
    bridged log: /v1/match over HTTP says offline (the bridge stopped), the replica holds
    every block, usable unknown; the stream out replays its run from seq 0 (the follower's
    state, every block) to sglang's own decoder."""
    out_pub, out_replay = f"ipc://{tmp_path}/out.pub", f"ipc://{tmp_path}/out.replay"
    follow = follow_service(
        tmp_path,
        log_url,
        "router",
        *("--http-port", "0", "--zmq-publish", out_pub, "--zmq-replay", out_replay),
        *("--zmq-format", "sglang"),
    ).start()
    try:
        status = follow.wait_for("restore", lambda s: s["restored"] and s["http_port"], 60)
        base = f"http://127.0.0.1:{status['http_port']}"
        sources = httpx.get(f"{base}/v1/sources", timeout=10).json()["sources"]
        assert sources["sg"]["blocks"] == blocks and sources["sg"]["state"] == "offline"
        assert sources["sg"]["offline"] == "offline marker: the bridge stopped"
        root, records = anyio.run(log_facts, log_url)
        body = {"token_ids": list(root), "extra_key": None}
        reply = httpx.post(f"{base}/v1/match", json=body, timeout=10).json()
        found = reply["sources"]["sg"]
        assert (found["cached_tokens"], found["usable_tokens"], found["state"]) == (
            None,
            None,
            "offline",
        )
        command = [str(SGLANG_PYTHON), "-W", "ignore", "-m", "tests.peers.kv_stream_reader"]
        reader = subprocess.run(
            [*command, "--engine", "sglang", "--pub", out_pub, "--replay", out_replay],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        result = json.loads(reader.stdout.splitlines()[-1])
        # the run starts with the follower's state (it restored by replaying the log's
        # records), then the records appended since: none here
        assert 1 <= result["replayed"] <= records and result["first"] == 0 and result["dense"]
        assert result["kinds"]["BlockStored"] >= blocks
        assert follow.stop() == 0, follow.stderr_tail()
    finally:
        follow.close()


async def log_facts(log_url: str) -> tuple[tuple[int, ...], int]:
    """The tokens of one root page the replica holds (the replica answers it held, usable
    unknown: the engine's stream carries no tombstones), and how many batches the log has."""
    async with await open_log(log_url) as log:
        replicas = ReplicaSet()
        follower = Follower(log, [replicas, PrefixIndex(replicas)])
        await follower.catch_up()
        tree = replicas["sg"]
        root = next(b.token_ids for b in tree.blocks() if b.parent_block_hash is None)
        held = PrefixIndex(replicas).match(list(root))["sg"]
        assert (held.full_tokens, held.swa_tokens) == (len(root), None)
        m = follower.metrics
        return root, m.records_read - m.heartbeats_read - m.offline_markers_read


def test_bridge_killed_and_restarted(tmp_path: Path) -> None:
    """A SIGKILLed bridge process, started again while the engine keeps serving, leaves a log
    whose replica holds exactly sglang's blocks (the new run rebuilds from the replay)."""
    require_sglang()
    pub, replay = f"ipc://{tmp_path}/kv.pub", f"ipc://{tmp_path}/kv.replay"
    log_url = f"file://{tmp_path}/log"
    engine = SglangEngine(pub, replay)
    bridge: subprocess.Popen[str] | None = None
    try:
        bridge, port = start_bridge(pub, replay, log_url)
        published = engine.serve(30)
        wait_for_counters(port, published)
        engine.serve(10, 1)  # some of it may be applied, some not, when the kill lands
        bridge.kill()
        bridge.wait()
        engine.serve(10, 2)
        bridge, port = start_bridge(pub, replay, log_url)
        published = engine.serve(10, 3)
        counters = wait_for_counters(port, published)
        assert counters["replayed"] > 0
        bridge.send_signal(signal.SIGTERM)
        _, err = bridge.communicate(timeout=60)
        assert bridge.returncode == 0, err
        expected = engine.blocks()
    finally:
        stop(bridge)
        engine.close()
    assert anyio.run(replica_blocks, log_url) == expected
