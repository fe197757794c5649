"""sgl-model-gateway's KV index (crates.io ``kv-index`` 2.0.0, its ``ChainIndex``) fed with
``swa-es follow --zmq-publish ... --zmq-format sglang`` agrees with ``/v1/match``.

``tests/peers/kv_index`` is a small Rust program on that crate: it decodes each message of the
stream, applies its events through the index's own ``apply_stored`` / ``apply_removed`` /
``apply_cleared`` (which refuse a store whose parent the worker does not hold), and answers a
prompt with the index's own request hashing (``compute_request_content_hashes``) and
``find_matches``. This test subscribes to the follower's stream, replays the run from seq 0
(the follower's state, then the records), follows the live messages, and hands every payload
to the program; for sampled prompts the worker's matched prefix equals ``cached_tokens``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import zmq

from tests.bridge.stream_out_workload import PAGE, append, ours, start_follower, stream_out_follower
from tests.peers.sglang_venv import ROOT

SOURCE = "worker-0"
PEER = ROOT / "tests" / "peers" / "kv_index" / "target" / "release" / "swa-es-kv-index-peer"
END = (-1).to_bytes(8, "big", signed=True)


def require_peer() -> Path:
    """The built program; skip (or fail with SWA_ES_REQUIRE_KV_INDEX=1) without it."""
    if PEER.exists():
        return PEER
    message = (
        "tests/peers/kv_index is not built "
        "(cargo build --release --manifest-path tests/peers/kv_index/Cargo.toml)"
    )
    if os.environ.get("SWA_ES_REQUIRE_KV_INDEX") == "1":
        pytest.fail(message)
    pytest.skip(message)


class KvIndexPeer:
    """The Rust program, one command a line."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [str(require_peer())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def _command(self, line: str) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        reply: dict[str, Any] = json.loads(self.process.stdout.readline())
        assert "error" not in reply, reply
        return reply

    def feed(self, topic: bytes, payload: bytes) -> dict[str, Any]:
        """Apply one message of the stream; the index's running counts."""
        return self._command(f"F {topic.hex()} {payload.hex()}")

    def matched(self, prompt: list[int]) -> int:
        """The index's matched prefix of SOURCE, in tokens."""
        reply = self._command(f"Q {PAGE} {','.join(map(str, prompt))}")
        return int(reply["matched"].get(SOURCE, 0))

    def close(self) -> None:
        """End the program."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=30)


def test_kv_index_agrees_with_match(tmp_path: Path) -> None:
    require_peer()
    setup = stream_out_follower(tmp_path, SOURCE, 11, "sglang", "--zmq-replay")
    log_url, workload, follow = setup.log_url, setup.workload, setup.follow
    pub, replay = setup.endpoints
    context = zmq.Context()
    peer = KvIndexPeer()
    try:
        base = start_follower(follow)
        sub = context.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.setsockopt(zmq.RCVTIMEO, 60_000)
        sub.connect(pub)
        dealer = context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.RCVTIMEO, 60_000)
        dealer.connect(replay)
        # the run from seq 0: sglang's replay replies (seq, payload), without the topic
        dealer.send_multipart([b"", (0).to_bytes(8, "big")])
        seqs: list[int] = []
        while (parts := dealer.recv_multipart())[1] != END:
            seqs.append(int.from_bytes(parts[1], "big"))
            status = peer.feed(SOURCE.encode(), parts[2])
        assert seqs == list(range(len(seqs))) and seqs, seqs
        # live: every message after the replayed ones, in order
        end = append(log_url, workload.batches(30))
        follow.wait_for("applied", lambda s: s["position"].get("0") == end, 60)
        last = seqs[-1] + 30
        while seqs[-1] < last:
            topic, seq_bytes, payload = sub.recv_multipart()
            seq = int.from_bytes(seq_bytes, "big")
            if seq <= seqs[-1]:
                continue
            assert seq == seqs[-1] + 1, f"live seq {seq} after {seqs[-1]}"
            assert topic == SOURCE.encode()
            seqs.append(seq)
            status = peer.feed(topic, payload)
        assert status["refused"] == [], status
        prompts = workload.samples(80)
        expected = ours(base, SOURCE, prompts)
        assert any(expected), "the samples hit nothing: the workload is wrong"
        got = [peer.matched(prompt) for prompt in prompts]
        differ = [(i, e, g) for i, (e, g) in enumerate(zip(expected, got, strict=True)) if e != g]
        assert not differ, f"(prompt, ours, the index's) differ: {differ[:10]}"
        assert httpx.get(f"{base}/healthz", timeout=10).status_code == 200
        sub.close(linger=0)
        dealer.close(linger=0)
    finally:
        peer.close()
        follow.close()
        context.term()
