"""Locating bench/.venv-sglang and bench/.venv-vllm, and driving the KV-event engine scripts
in them (``tests/peers/sglang_kv_engine.py``, ``tests/peers/vllm_kv_engine.py``)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import pytest

from tests.peers.json_lines import JsonLinesPeer

ROOT = Path(__file__).resolve().parents[2]
SGLANG_PYTHON = ROOT / "bench" / ".venv-sglang" / "bin" / "python"
VLLM_PYTHON = ROOT / "bench" / ".venv-vllm" / "bin" / "python"


def require_sglang() -> Path:
    """The sglang venv's python; skip (or fail with SWA_ES_REQUIRE_SGLANG=1) without it."""
    if SGLANG_PYTHON.exists():
        return SGLANG_PYTHON
    message = "bench/.venv-sglang is missing (bash bench/setup_sglang.sh)"
    if os.environ.get("SWA_ES_REQUIRE_SGLANG") == "1":
        pytest.fail(message)
    pytest.skip(message)


def require_vllm() -> Path:
    """The vLLM venv's python; skip (or fail with SWA_ES_REQUIRE_VLLM=1) without it."""
    if VLLM_PYTHON.exists():
        return VLLM_PYTHON
    message = "bench/.venv-vllm is missing (bash bench/setup_vllm.sh)"
    if os.environ.get("SWA_ES_REQUIRE_VLLM") == "1":
        pytest.fail(message)
    pytest.skip(message)


class PeerEngine(JsonLinesPeer):
    """An engine script in its peer venv, speaking JSON lines on stdin/stdout."""

    MODULE = ""

    def __init__(self, python: Path, endpoint: str, replay_endpoint: str, *extra: str) -> None:
        self.process = subprocess.Popen(
            [
                str(python),
                "-W",
                "ignore",
                "-m",
                self.MODULE,
                "--endpoint",
                endpoint,
                "--replay-endpoint",
                replay_endpoint,
                *extra,
            ],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        ready = self._read()
        assert ready.get("ready"), ready

    def serve(self, requests: int, seed: int = 0) -> int:
        """Serve ``requests`` chat requests; the number of batches published so far."""
        return int(self.command(cmd="serve", requests=requests, seed=seed)["published"])

    def close(self) -> None:
        """Shut the publisher down and wait for the process."""
        if self.process.poll() is None:
            with contextlib.suppress(RuntimeError, BrokenPipeError):
                self.command(cmd="exit")
        self.process.wait(timeout=30)

    def kill(self) -> None:
        """Kill the engine (no shutdown)."""
        self.process.kill()
        self.process.wait(timeout=30)


class SglangEngine(PeerEngine):
    """``tests/peers/sglang_kv_engine.py`` in the sglang venv: sglang's SWARadixCache publishing
    through sglang's ZmqEventPublisher."""

    MODULE = "tests.peers.sglang_kv_engine"

    def __init__(self, endpoint: str, replay_endpoint: str, *extra: str) -> None:
        super().__init__(require_sglang(), endpoint, replay_endpoint, *extra)

    def blocks(self) -> set[int]:
        """Every block hash sglang's tree holds."""
        return set(self.command(cmd="blocks")["blocks"])


class VllmEngine(PeerEngine):
    """``tests/peers/vllm_kv_engine.py`` in the vLLM venv: vLLM's KVCacheManager publishing
    through vLLM's ZmqEventPublisher."""

    MODULE = "tests.peers.vllm_kv_engine"

    def __init__(self, endpoint: str, replay_endpoint: str, *extra: str) -> None:
        super().__init__(require_vllm(), endpoint, replay_endpoint, *extra)

    def prefixes(self) -> tuple[set[str], int]:
        """The prefix key (``vllm_kv_engine.prefix_key``) of every block vLLM's cache holds,
        and how many blocks it has evicted (``BlockRemoved``) so far."""
        reply = self.command(cmd="prefixes")
        return set(reply["prefixes"]), int(reply["removed"])
