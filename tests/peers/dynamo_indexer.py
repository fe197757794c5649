"""NVIDIA Dynamo's standalone KV indexer (``python -m dynamo.indexer`` from ai-dynamo-runtime
1.6.1 in bench/.venv-dynamo) as a subprocess, driven over its own HTTP API: ``/register`` (a
worker's ZMQ endpoint and replay endpoint), ``/unregister``, ``/query`` (token ids, hashed by
Dynamo itself), ``/health``."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.peers.sglang_venv import ROOT

DYNAMO_PYTHON = ROOT / "bench" / ".venv-dynamo" / "bin" / "python"
MODEL = "default"
START_TIMEOUT_S = 60.0


def require_dynamo() -> Path:
    """The Dynamo venv's python; skip (or fail with SWA_ES_REQUIRE_DYNAMO=1) without it."""
    if DYNAMO_PYTHON.exists():
        return DYNAMO_PYTHON
    message = "bench/.venv-dynamo is missing (bash bench/setup_dynamo.sh)"
    if os.environ.get("SWA_ES_REQUIRE_DYNAMO") == "1":
        pytest.fail(message)
    pytest.skip(message)


def free_port() -> int:
    """A TCP port free on the loopback now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class DynamoIndexer:
    """One ``python -m dynamo.indexer`` process on ``port``."""

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / f"dynamo-{self.port}.log"
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    *(str(require_dynamo()), "-m", "dynamo.indexer"),
                    *("--port", str(self.port), "--threads", "1"),
                ],
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._healthy():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Dynamo's indexer did not start: {self.log_tail()}")
            time.sleep(0.2)

    def _healthy(self) -> bool:
        try:
            return httpx.get(f"{self.base}/health", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def log_tail(self) -> str:
        """The last lines the indexer logged."""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-15:])

    def _post(self, route: str, body: dict[str, Any]) -> Any:
        reply = httpx.post(f"{self.base}{route}", json=body, timeout=10)
        assert reply.is_success, f"{route}: {reply.status_code} {reply.text}"
        return reply.json() if reply.content else None

    def register(self, worker: int, endpoint: str, replay: str, block_size: int) -> None:
        """Subscribe to a worker's stream (Dynamo's ``/register``, with its replay endpoint)."""
        self._post(
            "/register",
            {
                "instance_id": worker,
                "endpoint": endpoint,
                "replay_endpoint": replay,
                "model_name": MODEL,
                "block_size": block_size,
            },
        )

    def unregister(self, worker: int) -> None:
        """Forget a worker (Dynamo's lifecycle step for a restarted publisher)."""
        self._post("/unregister", {"instance_id": worker, "model_name": MODEL})

    def matched(self, token_ids: list[int]) -> dict[int, int]:
        """Dynamo's ``/query``: per worker, the tokens of the device-tier prefix it holds."""
        reply = self._post("/query", {"token_ids": token_ids, "model_name": MODEL})
        return {int(worker): int(tiers["gpu"]) for worker, tiers in reply["instances"].items()}

    def close(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
