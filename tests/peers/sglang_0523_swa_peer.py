"""The test side of ``tests/peers/sglang_0523_swa_engine.py``: sglang 0.5.23's SWA cache with the
integration installed, in ``bench/.venv-sglang-0523``, one process for every case."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.peers.json_lines import JsonLinesPeer
from tests.peers.sglang_venv import ROOT

SGLANG_0523_PYTHON = ROOT / "bench" / ".venv-sglang-0523" / "bin" / "python"
REQUIRE_FLAG = "SWA_ES_REQUIRE_SGLANG_0523"


def require_sglang_0523() -> Path:
    """The sglang 0.5.23 venv's python; skip without it (fail with SWA_ES_REQUIRE_SGLANG_0523=1)."""
    if SGLANG_0523_PYTHON.exists():
        return SGLANG_0523_PYTHON
    message = "bench/.venv-sglang-0523 is missing (bash bench/setup_sglang_0523.sh)"
    if os.environ.get(REQUIRE_FLAG) == "1":
        pytest.fail(message)
    pytest.skip(message)


class Sglang0523SwaEngine(JsonLinesPeer):
    """sglang 0.5.23's ``UnifiedRadixCache`` (FULL + SWA) + ``swa_es.integrations.sglang`` + its
    ``ZmqEventPublisher``, in ``bench/.venv-sglang-0523``."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [
                str(require_sglang_0523()),
                "-W",
                "ignore",
                "-m",
                "tests.peers.sglang_0523_swa_engine",
            ],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        ready = self._read()
        assert ready.get("ready"), ready

    def start(self, **case: Any) -> dict[str, Any]:
        """A fresh cache for ``case``; the reply (``published`` batches, the tree ``core``)."""
        return self._checked(self.command(cmd="start", **case))

    def step(self) -> dict[str, Any]:
        """One step; its reply (``published``, ``op``, ``samples``, ``tombstones``)."""
        return self._checked(self.command(cmd="step"))

    @staticmethod
    def _checked(reply: dict[str, Any]) -> dict[str, Any]:
        if "published" not in reply:
            raise RuntimeError(f"the sglang 0.5.23 SWA engine failed: {reply}")
        return reply

    def close(self) -> None:
        """Shut the publisher down and wait for the process."""
        if self.process.poll() is None:
            with contextlib.suppress(RuntimeError, BrokenPipeError):
                self.command(cmd="exit")
        self.process.wait(timeout=30)
