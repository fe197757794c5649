"""A ``swa-es bridge`` process pointed where no engine publishes says so: a warning naming the
endpoint while nothing is heard, and an exit summary saying what it received from where
(it ran and exited 0 without a word before). Real ZMQ sockets, a real bridge process, no
engine."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import zmq

from swa_es.cli import EXIT_INTERRUPTED, EXIT_OK
from tests.swa_es.cli_process import CliProcess

pytestmark = pytest.mark.slow


def bridge(tmp_path: Path, endpoint: str, *extra: str) -> CliProcess:
    """A bridge on ``endpoint`` that warns after half a second of silence."""
    return CliProcess(
        "bridge", "--log", str(tmp_path / "log"), "--source", "engine-0", "--zmq", endpoint,
        "--engine-timeout-s", "0.5", *extra,
    )  # fmt: skip


def test_a_bridge_with_no_engine_warns_and_says_it_never_connected(tmp_path: Path) -> None:
    """Nothing listens at --zmq (nor at --replay): a warning names the endpoint; SIGTERM
    stops it with 0 and a summary of nothing received, never connected."""
    endpoint, replay = f"ipc://{tmp_path}/kv.pub", f"ipc://{tmp_path}/kv.replay"
    process = bridge(tmp_path, endpoint, "--replay", replay, "--replay-timeout-s", "0.2")
    try:
        start = process.wait_for_line(lambda line: "subscribing to" in line)
        assert f"subscribing to {endpoint}" in start and f"replay from {replay}" in start
        warning = process.wait_for_line(lambda line: "nothing heard from the engine" in line)
        assert f"no connection to {endpoint}" in warning, warning
        assert process.stop(signal.SIGTERM) == EXIT_OK, process.text()
    finally:
        process.kill()
    summary = process.lines[-1]
    assert summary.startswith("swa-es bridge: stopped (SIGTERM) after "), process.text()
    assert f"0 batches received from {endpoint}, never connected" in summary, summary
    assert f"0 replayed from {replay}" in summary, summary


def test_a_bridge_connected_to_a_silent_publisher_says_nothing_came(tmp_path: Path) -> None:
    """A PUB socket is bound at --zmq but publishes nothing: the bridge connects and warns
    that no KV event came; Ctrl-C (SIGINT) stops it with 130 (0 before) and a summary naming
    the endpoint, connected."""
    endpoint = f"ipc://{tmp_path}/silent.pub"
    context = zmq.Context()
    publisher = context.socket(zmq.PUB)
    publisher.bind(endpoint)
    process = bridge(tmp_path, endpoint)
    try:
        warning = process.wait_for_line(lambda line: "no KV event received" in line)
        assert f"connected to {endpoint}" in warning, warning
        assert process.stop(signal.SIGINT) == EXIT_INTERRUPTED, process.text()
    finally:
        process.kill()
        publisher.close(linger=0)
        context.term()
    summary = process.lines[-1]
    assert summary.startswith("swa-es bridge: stopped (SIGINT) after "), process.text()
    assert f"0 batches received from {endpoint};" in summary, summary
    assert "never connected" not in summary
