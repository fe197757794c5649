"""Running ``swa-es serve`` / ``swa-es follow`` as subprocesses, as the compose stack would.

A ``Service`` is one process with a JSON status file; tests wait on what the status says (never
on wall-clock sleeps), kill it with SIGKILL or stop it with SIGTERM.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from swa_es.service.status_file import read_status

STARTUP_TIMEOUT_S = 120.0  # importing torch on a loaded 2-core machine takes a while


def swa_es_command(*args: str) -> list[str]:
    """The command line running ``swa-es ARGS`` with this interpreter."""
    return [sys.executable, "-m", "swa_es.cli", *args]


class Service:
    """One ``swa-es`` subprocess writing ``status_file``."""

    def __init__(self, name: str, args: list[str], status_file: Path, log_dir: Path) -> None:
        self.name = name
        self.status_file = status_file
        self.stderr_path = log_dir / f"{name}.stderr"
        self.stdout_path = log_dir / f"{name}.stdout"
        self.args = [*args, "--status-file", str(status_file), "--status-every", "0.2"]
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Service:
        """Start (or restart) the process, with a fresh status file."""
        self.status_file.unlink(missing_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SWA_ES_")}
        with self.stdout_path.open("ab") as out, self.stderr_path.open("ab") as err:
            self.process = subprocess.Popen(
                swa_es_command(*self.args), stdout=out, stderr=err, env=env
            )
        return self

    def status(self) -> dict[str, Any] | None:
        """The last status the process wrote."""
        try:
            return read_status(self.status_file)
        except ValueError:
            return None  # caught between write and rename on a filesystem without atomic rename

    def wait_for(
        self, what: str, predicate: Callable[[dict[str, Any]], bool], timeout_s: float
    ) -> dict[str, Any]:
        """Poll the status until ``predicate`` holds; fail with the stderr tail otherwise."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status = self.status()
            if status is not None and predicate(status):
                return status
            if self.process is not None and self.process.poll() is not None and what != "exit":
                status = self.status()
                if status is not None and predicate(status):
                    return status
                raise AssertionError(
                    f"{self.name} exited ({self.process.returncode}) before "
                    f"{what}:\n{self.stderr_tail()}"
                )
            time.sleep(0.1)
        raise AssertionError(f"{self.name}: no {what} within {timeout_s} s:\n{self.stderr_tail()}")

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=30)

    def stop(self, timeout_s: float = 60.0) -> int:
        """SIGTERM and wait; the exit status."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.wait(timeout_s)

    def wait(self, timeout_s: float) -> int:
        """Wait for the process to exit; the exit status."""
        assert self.process is not None
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError(f"{self.name} did not exit:\n{self.stderr_tail()}") from None

    def stderr_tail(self) -> str:
        """The last lines the process wrote to stderr."""
        try:
            return "\n".join(self.stderr_path.read_text().splitlines()[-20:])
        except FileNotFoundError:
            return "(no stderr)"

    def close(self) -> None:
        """Make sure the process is gone."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)


def serve_service(workdir: Path, log_url: str, source: str, *extra: str) -> Service:
    """A ``swa-es serve`` process for ``source`` on ``log_url``."""
    args = [
        "serve",
        "--log",
        log_url,
        "--source",
        source,
        "--metrics-host",
        "127.0.0.1",
        "--metrics-port",
        "0",
        *extra,
    ]
    return Service(f"serve-{source}", args, workdir / f"serve-{source}.json", workdir)


def follow_service(workdir: Path, log_url: str, name: str, *extra: str) -> Service:
    """A ``swa-es follow`` process with snapshots under ``workdir``."""
    args = [
        "follow",
        "--log",
        log_url,
        "--create-log",  # the writer may start after it
        "--snapshots",
        str(workdir / f"snapshots-{name}"),
        "--metrics-host",
        "127.0.0.1",
        "--metrics-port",
        "0",
        *extra,
    ]
    return Service(f"follow-{name}", args, workdir / f"follow-{name}.json", workdir)
