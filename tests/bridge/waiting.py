"""What the peer tests share: a free TCP port, and waiting for a bridge to get somewhere."""

from __future__ import annotations

import socket
from collections.abc import Callable

import anyio

from swa_es.bridge.ingest import Bridge


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def wait_until(
    condition: Callable[[], bool], timeout_s: float = 60.0, bridge: Bridge | None = None
) -> None:
    """Poll ``condition`` until it holds; on timeout say where ``bridge`` (if given) stands."""
    deadline = anyio.current_time() + timeout_s
    while not condition():
        if anyio.current_time() > deadline:
            state = "" if bridge is None else f": {bridge.metrics}, next {bridge.tracker.expected}"
            raise TimeoutError(f"condition not met in {timeout_s} s{state}")
        await anyio.sleep(0.05)
