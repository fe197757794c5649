"""A tiny HTTP/1.1 server for ``/metrics`` (Prometheus text) and ``/healthz``, on anyio sockets.

It answers one GET per connection and closes it; that is all Prometheus and a container
healthcheck need, so no web framework is pulled in.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Final, Self

import anyio
import anyio.abc
from anyio.abc import SocketAttribute

from swa_es.service.prometheus import CONTENT_TYPE

logger = logging.getLogger(__name__)

MAX_REQUEST_BYTES: Final = 8192
REQUEST_TIMEOUT_S: Final = 5.0

RenderMetrics = Callable[[], str]
CheckHealth = Callable[[], tuple[bool, str]]


class MetricsServer:
    """Serves ``render()`` at ``/metrics`` and ``health()`` at ``/healthz`` until closed.

    ``health`` returns ``(healthy, detail)``; unhealthy answers 503. ``port=0`` picks a free port,
    readable from ``port`` once entered.
    """

    def __init__(
        self, render: RenderMetrics, health: CheckHealth, *, host: str = "0.0.0.0", port: int = 0
    ) -> None:
        self._render = render
        self._health = health
        self._host = host
        self._requested_port = port
        self._port: int | None = None
        self._group: anyio.abc.TaskGroup | None = None
        self.requests_served = 0

    @property
    def port(self) -> int:
        """The bound TCP port."""
        if self._port is None:
            raise RuntimeError("MetricsServer is not running")
        return self._port

    async def __aenter__(self) -> Self:
        listener = await anyio.create_tcp_listener(
            local_host=self._host, local_port=self._requested_port, reuse_port=False
        )
        self._port = int(listener.extra(SocketAttribute.local_port))
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        self._group.start_soon(self._serve, listener)
        logger.info("metrics on http://%s:%d/metrics", self._host, self._port)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._group is not None
        self._group.cancel_scope.cancel()
        await self._group.__aexit__(exc_type, exc, tb)
        self._group = None

    async def _serve(self, listener: anyio.abc.Listener[anyio.abc.SocketStream]) -> None:
        async with listener:
            await listener.serve(self._handle)

    async def _handle(self, stream: anyio.abc.SocketStream) -> None:
        async with stream:
            try:
                with anyio.fail_after(REQUEST_TIMEOUT_S):
                    head = await _read_head(stream)
                    status, content_type, body = self._answer(head)
                    await stream.send(_response(status, content_type, body))
                self.requests_served += 1
            except (TimeoutError, anyio.EndOfStream, anyio.BrokenResourceError, OSError) as exc:
                logger.debug("metrics connection dropped: %r", exc)

    def _answer(self, head: bytes) -> tuple[str, str, bytes]:
        parts = head.split(b"\r\n", 1)[0].split()
        if len(parts) != 3:
            return "400 Bad Request", "text/plain", b"bad request line\n"
        method, target = parts[0], parts[1].split(b"?", 1)[0]
        if method != b"GET":
            return "405 Method Not Allowed", "text/plain", b"only GET\n"
        if target == b"/metrics":
            return "200 OK", CONTENT_TYPE, self._render().encode()
        if target == b"/healthz":
            healthy, detail = self._health()
            status = "200 OK" if healthy else "503 Service Unavailable"
            return status, "text/plain", (detail + "\n").encode()
        return "404 Not Found", "text/plain", b"try /metrics or /healthz\n"


async def _read_head(stream: anyio.abc.SocketStream) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data and b"\n\n" not in data:
        if len(data) > MAX_REQUEST_BYTES:
            break
        data += await stream.receive(4096)
    return data


def _response(status: str, content_type: str, body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


async def http_get(host: str, port: int, target: str, *, timeout_s: float = 5.0) -> tuple[int, str]:
    """GET ``target`` from ``host:port``; ``(status code, body)``. For probes and tests."""
    with anyio.fail_after(timeout_s):
        async with await anyio.connect_tcp(host, port) as stream:
            request = f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
            await stream.send(request.encode())
            data = b""
            try:
                while True:
                    data += await stream.receive(65536)
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                pass
    head, _, body = data.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].split()
    if len(status_line) < 2 or not status_line[1].isdigit():
        raise OSError(f"bad HTTP response from {host}:{port}: {head[:80]!r}")
    return int(status_line[1]), body.decode()


async def start_metrics_server(
    stack: AsyncExitStack,
    render: RenderMetrics,
    health: CheckHealth,
    *,
    host: str,
    port: int | None,
) -> int | None:
    """Serve ``/metrics`` and ``/healthz`` until ``stack`` closes; the bound port (None: off)."""
    if port is None:
        return None
    server = MetricsServer(render, health, host=host, port=port)
    await stack.enter_async_context(server)
    return server.port
