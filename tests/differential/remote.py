"""The test side of the sglang driver: one subprocess of sglang's venv, spoken to in JSON lines."""

from __future__ import annotations

import json
import os
import select
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.differential.program import Outcome
from tests.differential.steps import CacheConfig, Step, config_to_json, step_to_json

ROOT = Path(__file__).resolve().parents[2]
SGLANG_PYTHON = ROOT / "bench" / ".venv-sglang" / "bin" / "python"
SGLANG_VERSION = "0.5.16"
SETUP_HINT = "bash bench/setup_sglang.sh"
START_TIMEOUT_S = 600.0
"""How long the driver may take to import sglang (seconds when idle, minutes on a busy machine)."""


class DriverError(RuntimeError):
    """The sglang driver failed to start, died, or answered something unreadable."""


@dataclass(frozen=True, slots=True)
class SglangRun:
    """sglang's outcomes for one sequence (the fresh cache first), and its state if asked."""

    outcomes: list[Outcome]
    describe: list[str] | None


class SglangDriver:
    """A running ``tests.differential.sglang_driver`` in ``bench/.venv-sglang``.

    A context manager: leaving it closes stdin and waits for the process.
    """

    def __init__(self, python: Path = SGLANG_PYTHON) -> None:
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}
        for flag in ("SGLANG_OPT_SWA_RADIX_CACHE_COMPACT", "SGLANG_OPT_SWA_SPLIT_LEAF_ON_INSERT"):
            env.pop(flag, None)  # compare against sglang's defaults
        # stderr goes to a file: a chatty child must never block on a full pipe.
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115  # closed by close()
        self._process = subprocess.Popen(
            [str(python), "-m", "tests.differential.sglang_driver"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        hello = self._read(timeout_s=START_TIMEOUT_S)
        if hello.get("sglang") != SGLANG_VERSION or any(hello.get("flags", {}).values()):
            self.close()
            raise DriverError(f"unexpected sglang driver greeting {hello!r}")

    def __enter__(self) -> SglangDriver:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the driver (closing stdin ends its loop)."""
        process = self._process
        if process.stdin is not None and not process.stdin.closed:
            process.stdin.close()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        self._stderr.close()

    def run(self, config: CacheConfig, steps: Sequence[Step], describe: bool = False) -> SglangRun:
        """Run ``steps`` on a fresh sglang cache built from ``config``."""
        request = {
            "config": config_to_json(config),
            "steps": [step_to_json(s) for s in steps],
            "describe": describe,
        }
        stdin = self._process.stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps(request) + "\n")
            stdin.flush()
        except BrokenPipeError as exc:
            raise DriverError(f"the sglang driver is gone: {self._stderr_tail()}") from exc
        reply = self._read()
        if "error" in reply:
            raise DriverError(f"the sglang driver rejected a request: {reply['error']}")
        return SglangRun(reply["outcomes"], reply.get("describe"))

    def _read(self, timeout_s: float | None = None) -> dict[str, Any]:
        stdout = self._process.stdout
        assert stdout is not None
        if timeout_s is not None and not select.select([stdout], [], [], timeout_s)[0]:
            raise DriverError(
                f"the sglang driver said nothing for {timeout_s:.0f} s: {self._stderr_tail()}"
            )
        line = stdout.readline()
        if not line:
            raise DriverError(f"the sglang driver exited: {self._stderr_tail()}")
        try:
            reply: dict[str, Any] = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DriverError(f"the sglang driver wrote {line[:200]!r}, not JSON") from exc
        return reply

    def _stderr_tail(self) -> str:
        process = self._process
        if process.poll() is None:
            process.kill()
        status = process.wait()
        self._stderr.seek(0)
        return self._stderr.read()[-2000:] or f"exit status {status}"


def sglang_unavailable_reason(python: Path = SGLANG_PYTHON) -> str | None:
    """Why the driver cannot run here (None when the venv imports sglang's cache)."""
    shown = python.relative_to(ROOT) if python.is_relative_to(ROOT) else python
    if not python.exists():
        return f"no sglang venv at {shown}; run `{SETUP_HINT}`"
    probe = subprocess.run(
        [str(python), "-W", "ignore", "-c", "import tests.differential.sglang_driver"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        tail = probe.stderr.strip().splitlines()[-1:] or ["(no output)"]
        return f"{shown} cannot import sglang's SWARadixCache: {tail[0]}"
    return None
