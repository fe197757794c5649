"""The HTTP face of ``serve``, ``follow`` and ``bridge``: Starlette on uvicorn, in our task group.

``build_app`` makes the ASGI app: ``/metrics`` (prometheus_client exposition of a registry),
``/healthz`` (503 with the reason while unhealthy, e.g. restoring), and, on a follower, the
routing API: ``POST /v1/match`` and ``GET /v1/sources``. ``HttpServer`` is an async context
manager owning the uvicorn server task; it binds before it returns (``port=0`` picks a free
port, read back from ``port``).

Hostile clients are bounded: a request head over ``MAX_HEAD_BYTES`` gets 431 (and h11 never
buffers much more of an unfinished one), a body over ``max_request_bytes`` gets 413, and a
connection that has not delivered a complete request head ``HEAD_TIMEOUT_S`` after it opened (or
after its previous response) is closed, however slowly it trickles bytes.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Protocol, Self

import anyio
import h11
import orjson
import uvicorn
from anyio.abc import TaskGroup, TaskStatus
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger(__name__)

DEFAULT_MAX_REQUEST_BYTES: Final = 4 * 1024 * 1024
MAX_HEAD_BYTES: Final = 8 * 1024
"""The largest request line plus headers served (nginx's default header buffer)."""
HEAD_TIMEOUT_S: Final = 10.0
MAX_TOKEN_ID: Final = 0xFFFFFFFF

CheckHealth = Callable[[], tuple[bool, str]]


class RoutingBackend(Protocol):
    """What the routing API reads (a follower service provides it)."""

    def match(self, token_ids: list[int], extra_key: str | None) -> dict[str, dict[str, Any]]:
        """Per source: ``cached_tokens``, ``usable_tokens`` and ``state``."""
        ...

    def sources(self) -> dict[str, dict[str, Any]]:
        """Per source: epoch, blocks, tombstones, lag and digest state."""
        ...


class BadRequestError(Exception):
    """A request body the API cannot serve; the message goes back with status 400."""


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def _read_body(request: Request, limit_bytes: int) -> bytes:
    """The body, refusing more than ``limit_bytes`` (declared or streamed) with 413."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit_bytes:
        raise _TooLargeError(int(declared))
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > limit_bytes:
            raise _TooLargeError(len(body))
    return bytes(body)


class _TooLargeError(Exception):
    def __init__(self, size: int) -> None:
        self.size = size


def parse_match_request(body: bytes) -> tuple[list[int], str | None]:
    """Parse ``{"token_ids": [int...], "extra_key": str|null}`` (``BadRequestError`` if bad)."""
    try:
        raw = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequestError(f"body is not JSON: {exc}") from None
    if type(raw) is not dict:
        raise BadRequestError("body must be a JSON object")
    unknown = sorted(set(raw) - {"token_ids", "extra_key"})
    if unknown:
        raise BadRequestError(f"unknown field {unknown[0]!r} (expected token_ids, extra_key)")
    token_ids = raw.get("token_ids")
    if type(token_ids) is not list:
        raise BadRequestError("token_ids must be a list of ints")
    # Three passes in C for the common case; the slow loop only to name a bad token.
    if token_ids and (
        not set(map(type, token_ids)) <= {int}
        or min(token_ids) < 0
        or max(token_ids) > MAX_TOKEN_ID
    ):
        for index, token in enumerate(token_ids):
            if type(token) is not int or not 0 <= token <= MAX_TOKEN_ID:
                raise BadRequestError(
                    f"token_ids[{index}] must be an int in [0, 2**32), got {token!r}"
                )
    extra_key = raw.get("extra_key")
    if extra_key is not None and type(extra_key) is not str:
        raise BadRequestError("extra_key must be a string or null")
    return token_ids, extra_key


@dataclass(frozen=True, slots=True)
class AppParts:
    """What one service exposes over HTTP."""

    registry: CollectorRegistry
    health: CheckHealth
    routing: RoutingBackend | None = None
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES


def build_app(parts: AppParts) -> Starlette:
    """The ASGI app of one service."""

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(parts.registry), media_type=CONTENT_TYPE_LATEST)

    async def healthz(request: Request) -> Response:
        healthy, detail = parts.health()
        return PlainTextResponse(detail + "\n", status_code=200 if healthy else 503)

    def unavailable() -> JSONResponse | None:
        healthy, detail = parts.health()
        return None if healthy else _error(503, detail)

    async def match(request: Request) -> Response:
        assert parts.routing is not None
        try:
            body = await _read_body(request, parts.max_request_bytes)
        except _TooLargeError as exc:
            return _error(413, f"body of {exc.size} bytes exceeds {parts.max_request_bytes}")
        try:
            token_ids, extra_key = parse_match_request(body)
        except BadRequestError as exc:
            return _error(400, str(exc))
        busy = unavailable()
        if busy is not None:
            return busy
        return _json({"sources": parts.routing.match(token_ids, extra_key)})

    async def sources(request: Request) -> Response:
        assert parts.routing is not None
        busy = unavailable()
        if busy is not None:
            return busy
        return _json({"sources": parts.routing.sources()})

    routes = [
        Route("/metrics", metrics, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
    ]
    if parts.routing is not None:
        routes += [
            Route("/v1/match", match, methods=["POST"]),
            Route("/v1/sources", sources, methods=["GET"]),
        ]
    return Starlette(routes=routes, middleware=[Middleware(_HeadSizeLimit)])


class _HeadSizeLimit:
    """Answers 431 to a request whose line and headers exceed ``MAX_HEAD_BYTES``."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            size = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
            size += sum(len(name) + len(value) + 4 for name, value in scope["headers"])
            if size > MAX_HEAD_BYTES:
                response = PlainTextResponse(
                    f"request head of {size} bytes exceeds {MAX_HEAD_BYTES}\n", status_code=431
                )
                await response(scope, receive, send)
                return
        await self._app(scope, receive, send)


class _HeadDeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol, plus a deadline for each request head: uvicorn's own idle timer
    restarts on every byte, so a client trickling a head would otherwise hold the connection
    forever."""

    _head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_deadline()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm_head_deadline()  # the head is complete

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_head_deadline()  # the next request on this connection

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_deadline()
        super().connection_lost(exc)

    def _arm_head_deadline(self) -> None:
        self._disarm_head_deadline()
        self._head_deadline = self.loop.call_later(HEAD_TIMEOUT_S, self._head_timed_out)

    def _disarm_head_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_timed_out(self) -> None:
        self._head_deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


def _json(content: Mapping[str, Any]) -> Response:
    return Response(orjson.dumps(content), media_type="application/json")


class _QuietServer(uvicorn.Server):
    """A uvicorn server that leaves signals to its host (the CLI cancels the task group)."""

    def install_signal_handlers(self) -> None:  # uvicorn < 0.29
        return

    def capture_signals(self) -> Any:  # uvicorn >= 0.29: a context manager
        import contextlib

        return contextlib.nullcontext()


def bind_listener(host: str, port: int, backlog: int = 128) -> socket.socket:
    """A listening TCP socket on ``host:port`` (0: any free port) for uvicorn to serve.

    The protocol is named (``IPPROTO_TCP``, not the default 0): asyncio turns on TCP_NODELAY
    only for connections accepted from a socket whose ``proto`` says TCP. Without it Nagle
    holds back the response body (h11 writes headers and body separately) until the client's
    delayed ACK of the headers, about 40 ms later, on every request.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class HttpServer:
    """Serves ``app`` on ``host:port`` until the context exits (an async context manager)."""

    def __init__(self, app: Starlette, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self._app = app
        self._host = host
        self._requested_port = port
        self._port: int | None = None
        self._server: _QuietServer | None = None
        self._group: TaskGroup | None = None

    @property
    def port(self) -> int:
        """The bound TCP port."""
        if self._port is None:
            raise RuntimeError("HttpServer is not running")
        return self._port

    @property
    def host(self) -> str:
        """The address served."""
        return self._host

    async def __aenter__(self) -> Self:
        sock = bind_listener(self._host, self._requested_port)
        self._port = int(sock.getsockname()[1])
        config = uvicorn.Config(
            self._app,
            lifespan="off",
            log_level="warning",
            access_log=False,
            http=_HeadDeadlineProtocol,
            h11_max_incomplete_event_size=MAX_HEAD_BYTES + 1024,
            ws="none",
            timeout_graceful_shutdown=2,
        )
        server = _QuietServer(config)
        self._server = server
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group
        group.start_soon(server.serve, [sock])
        with anyio.fail_after(10):
            while not server.started:  # noqa: ASYNC110 -- uvicorn exposes a flag, not an event
                await anyio.sleep(0.01)
        logger.info("http on http://%s:%d", self._host, self._port)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._group is not None and self._server is not None
        self._server.should_exit = True
        group, self._group = self._group, None
        await group.__aexit__(None, None, None)


async def start_http_server(
    stack: AsyncExitStack, parts: AppParts, *, host: str, port: int | None
) -> int | None:
    """Serve ``parts`` until ``stack`` closes; the bound port (None: ``port`` None, off)."""
    if port is None:
        return None
    server = await stack.enter_async_context(HttpServer(build_app(parts), host=host, port=port))
    return server.port


async def run_http_server(
    parts: AppParts,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``parts`` until cancelled, reporting the bound port through ``task_status``."""
    async with HttpServer(build_app(parts), host=host, port=port) as server:
        task_status.started(server.port)
        await anyio.sleep_forever()
