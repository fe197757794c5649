"""A child process driven by JSON lines: one command a line on its stdin, one reply a line on
its stdout (the KV-event engine scripts of tests/peers, in a venv or in a container)."""

from __future__ import annotations

import json
import subprocess
from typing import Any


class PeerExitedError(RuntimeError):
    """The peer process closed its stdout (it exited) before replying."""


class JsonLinesPeer:
    """Commands to, and replies from, ``self.process`` (started by the subclass, in text mode)."""

    process: subprocess.Popen[str]

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise PeerExitedError(f"{type(self).__name__} exited with {self.process.wait()}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def command(self, **request: Any) -> dict[str, Any]:
        """Send one command, return its reply."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self._read()
