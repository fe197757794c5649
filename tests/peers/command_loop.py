"""The stdin/stdout protocol both peer engines speak (they run in their engine's venv).

One JSON object a line on stdin (``{"cmd": NAME, ...}``), one JSON reply a line on stdout:
``{"ready": true}`` first, then the handler's reply for each command, ``{"error": ...}`` for an
unknown one, and ``{"bye": true}`` for ``exit``. The engine's ZMQ publisher is shut down on
``exit`` and when stdin closes.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

Handler = Callable[[dict[str, Any]], dict[str, Any]]


class _Queue(Protocol):
    def empty(self) -> bool: ...


def _reply(message: dict[str, Any]) -> None:
    print(json.dumps(message), flush=True)


def wait_sent(queue: _Queue, poll_s: float = 0.01) -> None:
    """Block until the publisher's send queue is empty: its batches are sent, not just queued."""
    while not queue.empty():
        time.sleep(poll_s)


def serve_commands(handlers: Mapping[str, Handler], shutdown: Callable[[], None]) -> int:
    """Announce readiness, answer each command line with its handler, return 0 at the end."""
    _reply({"ready": True})
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        cmd = request["cmd"]
        if cmd == "exit":
            shutdown()
            _reply({"bye": True})
            return 0
        handler = handlers.get(cmd)
        _reply(handler(request) if handler else {"error": f"unknown command {cmd!r}"})
    shutdown()
    return 0
