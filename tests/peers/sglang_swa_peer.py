"""The test side of ``tests/peers/sglang_swa_engine.py``: sglang's SWA cache with the integration
installed, in its venv, one process for every case, driven one step at a time."""

from __future__ import annotations

import contextlib
import subprocess
from typing import Any

from tests.peers.json_lines import JsonLinesPeer
from tests.peers.sglang_venv import ROOT, require_sglang


class SglangSwaEngine(JsonLinesPeer):
    """sglang 0.5.16's ``SWARadixCache`` + ``swa_es.integrations.sglang`` + its
    ``ZmqEventPublisher``, in ``bench/.venv-sglang``."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [str(require_sglang()), "-W", "ignore", "-m", "tests.peers.sglang_swa_engine"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        ready = self._read()
        assert ready.get("ready"), ready

    def start(self, **case: Any) -> int:
        """A fresh cache for ``case`` (see ``Session.start``); the batches it published."""
        return int(self._checked(self.command(cmd="start", **case))["published"])

    def step(self) -> dict[str, Any]:
        """One step; its reply (``published``, ``op``, ``samples``, ``tombstones``)."""
        return self._checked(self.command(cmd="step"))

    @staticmethod
    def _checked(reply: dict[str, Any]) -> dict[str, Any]:
        if "published" not in reply:
            raise RuntimeError(f"the sglang SWA engine failed: {reply}")
        return reply

    def close(self) -> None:
        """Shut the publisher down and wait for the process."""
        if self.process.poll() is None:
            with contextlib.suppress(RuntimeError, BrokenPipeError):
                self.command(cmd="exit")
        self.process.wait(timeout=30)
