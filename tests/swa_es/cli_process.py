"""A ``swa-es`` command run as a real process whose stderr lines a test waits on (a reader
thread collects them, so the process never blocks on a full pipe)."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tests.compose.services import STARTUP_TIMEOUT_S, swa_es_command


class CliProcess:
    """``swa-es ARGS`` running; ``lines`` holds every stderr line read so far."""

    def __init__(self, *args: str, cwd: Path | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SWA_ES_")}
        self.process = subprocess.Popen(
            swa_es_command(*args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=cwd,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._stdout: list[str] = []
        threading.Thread(target=self._read_stderr, daemon=True).start()
        self._stdout_reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._stdout_reader.start()

    @property
    def stdout(self) -> str:
        """What it wrote on stdout so far."""
        return "".join(self._stdout)

    def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._stdout.append(line)

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def _drain(self, wait_s: float) -> bool:
        """Move what the reader got into ``lines``; False once stderr is closed."""
        try:
            item = self._queue.get(timeout=wait_s)
        except queue.Empty:
            return True
        while True:
            if item is None:
                return False
            self.lines.append(item)
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return True

    def wait_for_line(
        self, predicate: Callable[[str], bool], timeout_s: float = STARTUP_TIMEOUT_S
    ) -> str:
        """The first stderr line ``predicate`` holds for (waiting for it); fails with what the
        process said when it exits or ``timeout_s`` passes first."""
        deadline = time.monotonic() + timeout_s
        seen = 0
        while True:
            for line in self.lines[seen:]:
                if predicate(line):
                    return line
            seen = len(self.lines)
            if not self._drain(0.1) and seen == len(self.lines):
                raise AssertionError(
                    f"exited ({self.process.wait()}) without the line:\n" + self.text()
                )
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError("no such line in time:\n" + self.text())

    def stop(self, signum: signal.Signals, timeout_s: float = 60.0) -> int:
        """Send ``signum``, wait for the exit; the exit status (all stderr read)."""
        self.process.send_signal(signum)
        return self.wait(timeout_s)

    def wait(self, timeout_s: float = 60.0) -> int:
        """Wait for the exit; the exit status (all stderr read)."""
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("did not exit:\n" + self.text()) from None
        while self._drain(5.0):
            pass
        self._stdout_reader.join(timeout=5.0)
        return self.process.returncode

    def text(self) -> str:
        """Every stderr line read so far."""
        return "\n".join(self.lines)

    def kill(self) -> None:
        """SIGKILL it if it still runs."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
