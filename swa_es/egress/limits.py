"""Bounds on what a client of the follower's request sockets (replay, snapshot) may ask.

``ClientRate`` is a token bucket per client: ``per_s`` requests a second, bursts of up to
``max(1, per_s)``. A client is named by what the request's frame says of its peer
(``client_of``): its CURVE public key (ZAP's User-Id) where CURVE is on, else its address, else
its connection's routing id. The buckets are bounded (``max_clients``, least recently seen
dropped first), so many clients cannot grow them without end.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

import zmq

MAX_CLIENTS = 4096


class ClientRate:
    """A per-client token bucket (see the module docstring); ``clock`` in seconds."""

    def __init__(
        self,
        per_s: float,
        *,
        max_clients: int = MAX_CLIENTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not per_s > 0:
            raise ValueError(f"per_s: expected a positive rate, got {per_s!r}")
        self.per_s = per_s
        self.burst = max(1.0, per_s)
        self.max_clients = max_clients
        self._clock = clock
        self._buckets: OrderedDict[bytes, tuple[float, float]] = OrderedDict()

    def allow(self, client: bytes) -> bool:
        """Whether ``client`` may make a request now (taking one token if so)."""
        now = self._clock()
        tokens, at = self._buckets.pop(client, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.per_s)
        allowed = tokens >= 1.0
        self._buckets[client] = (tokens - 1.0 if allowed else tokens, now)
        while len(self._buckets) > self.max_clients:
            self._buckets.popitem(last=False)
        return allowed


def client_of(frame: zmq.Frame, identity: bytes) -> bytes:
    """Who sent ``frame``: its CURVE key (ZAP's User-Id), else its peer address, else the
    connection's routing ``identity``."""
    for prop in ("User-Id", "Peer-Address"):
        try:
            value = frame.get(prop)
        except zmq.ZMQError:
            continue
        if isinstance(value, str) and value and value != "anonymous":
            return f"{prop}:{value}".encode()
    return b"id:" + identity
