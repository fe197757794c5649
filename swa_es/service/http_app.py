"""The HTTP face of ``serve``, ``follow`` and ``bridge``: an ASGI app on uvicorn (httptools
parser), in our task group.

``build_app`` makes the ASGI app: ``/metrics`` (prometheus_client exposition of a registry),
``/healthz`` (503 with the reason while unhealthy, e.g. restoring), and, on a follower, the
routing API: ``POST /v1/match`` and ``GET /v1/sources``. ``POST /v1/match`` is a router's hot
path, so it is served by a plain ASGI handler (``_MatchEndpoint``: no framework routing, request
or response objects); the other routes go through Starlette. The bodies it accepts are those of
``match_query``. ``HttpServer`` is an async context manager owning the uvicorn server task; it
binds before it returns (``port=0`` picks a free port, read back from ``port``).

Hostile clients are bounded: a request head over ``MAX_HEAD_BYTES`` gets 431 (and the protocol
never buffers much more of an unfinished one), a body over ``max_request_bytes`` gets 413, and a
connection that has not delivered a complete request head ``HEAD_TIMEOUT_S`` after it opened (or
after its previous response) is closed, however slowly it trickles bytes.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable, Iterable, Sequence
from contextlib import AsyncExitStack, nullcontext
from dataclasses import dataclass
from http import HTTPStatus
from types import TracebackType
from typing import Any, Final, Protocol, Self

import anyio
import orjson
import uvicorn
from anyio.abc import TaskGroup, TaskStatus
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from swa_es.service.match_query import (
    BadRequestError,
    Query,
    UnsupportedMediaError,
    parse_body,
)

logger = logging.getLogger(__name__)

DEFAULT_MAX_REQUEST_BYTES: Final = 4 * 1024 * 1024
MAX_HEAD_BYTES: Final = 8 * 1024
"""The largest request line plus headers served (nginx's default header buffer)."""
HEAD_SLACK_BYTES: Final = 1024
"""How far past ``MAX_HEAD_BYTES`` an unfinished head may grow before the connection is cut."""
HEAD_TIMEOUT_S: Final = 10.0

CheckHealth = Callable[[], tuple[bool, str]]
SourceAnswers = dict[str, dict[str, Any]]
Reply = tuple[int, bytes]
"""An HTTP status and its JSON body."""


class RoutingBackend(Protocol):
    """What the routing API reads (a follower service provides it)."""

    def answer(self, query: Query) -> SourceAnswers:
        """Per source: ``cached_tokens``, ``usable_tokens`` and ``state``."""
        ...

    def as_of(self) -> dict[str, Any]:
        """What the answers reflect: log position, lag, each source's last batch."""
        ...

    def sources(self) -> SourceAnswers:
        """Per source: epoch, blocks, tombstones, lag and digest state."""
        ...


@dataclass(frozen=True, slots=True)
class AppParts:
    """What one service exposes over HTTP."""

    registry: CollectorRegistry
    health: CheckHealth
    routing: RoutingBackend | None = None
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES


_JSON_HEADERS: Final = [(b"content-type", b"application/json")]
_CLOSE: Final = [(b"connection", b"close")]


async def _reply(
    send: Send, status: int, body: bytes, headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*_JSON_HEADERS, (b"content-length", b"%d" % len(body)), *headers],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _error_body(message: str) -> bytes:
    return orjson.dumps({"error": message})


async def _error(
    send: Send, status: int, message: str, headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    await _reply(send, status, _error_body(message), headers)


class _MatchEndpoint:
    """``POST /v1/match`` as a plain ASGI handler (the hot path of a router)."""

    def __init__(self, parts: AppParts, routing: RoutingBackend) -> None:
        self._routing = routing
        self._health = parts.health
        self._limit_bytes = parts.max_request_bytes

    @property
    def limit_bytes(self) -> int:
        """The largest body served."""
        return self._limit_bytes

    def respond(self, content_type: str | None, body: bytes, query_string: bytes) -> Reply:
        """The status and JSON body answering one whole request (no I/O: the protocol's fast
        path and the ASGI handler both send what this returns)."""
        try:
            parsed = parse_body(content_type, body, query_string)
        except BadRequestError as exc:
            return 400, _error_body(str(exc))
        except UnsupportedMediaError as exc:
            return 415, _error_body(str(exc))
        healthy, detail = self._health()
        if not healthy:
            return 503, _error_body(detail)
        routing = self._routing
        document: dict[str, Any]
        if parsed.batch:
            answers = [{"sources": routing.answer(query)} for query in parsed.queries]
            document = {"answers": answers, "as_of": routing.as_of()}
        else:
            document = {"sources": routing.answer(parsed.queries[0]), "as_of": routing.as_of()}
        return 200, orjson.dumps(document)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            await _error(send, 405, "use POST", [(b"allow", b"POST")])
            return
        content_type: str | None = None
        declared: bytes | None = None
        for name, value in scope["headers"]:
            if name == b"content-type":
                content_type = value.decode("latin-1")
            elif name == b"content-length":
                declared = value
        limit = self._limit_bytes
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._too_large(send, int(declared))
            return
        message = await receive()
        body = message.get("body", b"")
        if message.get("more_body", False):
            buffer = bytearray(body)
            while message.get("more_body", False):
                message = await receive()
                buffer += message.get("body", b"")
                if len(buffer) > limit:
                    await self._too_large(send, len(buffer))
                    return
            body = bytes(buffer)
        if message["type"] == "http.disconnect":
            return
        if len(body) > limit:
            await self._too_large(send, len(body))
            return
        status, reply = self.respond(content_type, body, scope["query_string"])
        await _reply(send, status, reply)

    async def _too_large(self, send: Send, size: int) -> None:
        # the rest of the body is not read: close the connection rather than drain it
        await _error(send, 413, f"body of {size} bytes exceeds {self._limit_bytes}", _CLOSE)


def _head_bytes(target_bytes: int, headers: Iterable[tuple[bytes, bytes]]) -> int:
    """The size a request head is held to (``MAX_HEAD_BYTES``): its target and headers."""
    return target_bytes + sum(len(name) + len(value) + 4 for name, value in headers)


class _App:
    """The service's ASGI app: 431 for oversized heads, ``/v1/match`` straight to its handler,
    everything else through Starlette."""

    def __init__(self, framework: ASGIApp, match: _MatchEndpoint | None) -> None:
        self._framework = framework
        self._match = match

    @property
    def match_endpoint(self) -> _MatchEndpoint | None:
        """The ``/v1/match`` handler (None: no routing API)."""
        return self._match

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            target = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
            size = _head_bytes(target, scope["headers"])
            if size > MAX_HEAD_BYTES:
                response = PlainTextResponse(
                    f"request head of {size} bytes exceeds {MAX_HEAD_BYTES}\n", status_code=431
                )
                await response(scope, receive, send)
                return
            if self._match is not None and scope["path"] == "/v1/match":
                await self._match(scope, receive, send)
                return
        await self._framework(scope, receive, send)


def build_app(parts: AppParts) -> ASGIApp:
    """The ASGI app of one service."""

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(parts.registry), media_type=CONTENT_TYPE_LATEST)

    async def healthz(request: Request) -> Response:
        healthy, detail = parts.health()
        return PlainTextResponse(detail + "\n", status_code=200 if healthy else 503)

    async def sources(request: Request) -> Response:
        assert parts.routing is not None
        healthy, detail = parts.health()
        if not healthy:
            return Response(orjson.dumps({"error": detail}), 503, media_type="application/json")
        document = {"sources": parts.routing.sources(), "as_of": parts.routing.as_of()}
        return Response(orjson.dumps(document), media_type="application/json")

    routes = [
        Route("/metrics", metrics, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
    ]
    match = None
    if parts.routing is not None:
        routes.append(Route("/v1/sources", sources, methods=["GET"]))
        match = _MatchEndpoint(parts, parts.routing)
    return _App(Starlette(routes=routes), match)


_STATUS_LINES: Final = {
    status: b"HTTP/1.1 %d %s\r\n" % (status, HTTPStatus(status).phrase.encode("ascii"))
    for status in (200, 400, 413, 415, 431, 500, 503, 505)
}
_MATCH_PATH: Final = b"/v1/match"


def _response_bytes(
    status: int,
    content_type: bytes,
    body: bytes,
    *,
    close: bool,
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> bytes:
    """A whole HTTP/1.1 response written by the protocol itself: status line, ``headers``,
    type, length, ``connection: close`` when ``close``, then the body."""
    head = [_STATUS_LINES[status]]
    for name, value in headers:
        head += (name, b": ", value, b"\r\n")
    head.append(b"content-type: %s\r\ncontent-length: %d\r\n" % (content_type, len(body)))
    if close:
        head.append(b"connection: close\r\n")
    head += (b"\r\n", body)
    return b"".join(head)


@dataclass(slots=True)
class _FastRequest:
    """A ``POST /v1/match`` the protocol answers itself, while its body arrives."""

    content_type: str | None
    query_string: bytes
    keep_alive: bool
    parts: list[bytes]


class _BoundedHeadProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with two bounds on request heads, and the routing API's
    hot route answered in the protocol itself.

    Bounds: a head still unfinished after ``MAX_HEAD_BYTES + HEAD_SLACK_BYTES`` gets 431 and the
    connection is closed (the parser itself has no limit), and a head must be complete
    ``HEAD_TIMEOUT_S`` after the connection opened or the previous response ended (uvicorn's own
    idle timer restarts on every byte, so a client trickling a head would otherwise hold the
    connection forever).

    Hot route: a subclass made by ``_protocol_class`` answers a plain ``POST /v1/match``
    (HTTP/1.1, a ``Content-Length`` within the limit, no ``Expect``, nothing before it still
    being answered, the client reading its replies) as soon as its body is complete, with the
    bytes of ``_MatchEndpoint.respond`` in one write: no ASGI task, scope or messages. The
    answer is computed without awaiting anything either way, so only the per-request overhead
    goes. Every other request takes the ASGI path, which answers the same way.
    """

    _head_deadline: asyncio.TimerHandle | None = None
    _in_head = True
    _head_bytes = 0
    _heads_ended = 0
    _refused = False
    _fast_match: _MatchEndpoint | None = None
    _fast: _FastRequest | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_deadline()

    def data_received(self, data: bytes) -> None:
        # A chunk counts toward the head only when it began inside a head and no head ended in
        # it; one where the next head begins (after a head or a body ended) restarts the count,
        # so the bound is this limit plus one read.
        was_in_head = self._in_head
        self._heads_ended = 0
        super().data_received(data)
        if not self._in_head or self.transport.is_closing():
            return
        if was_in_head and self._heads_ended == 0:
            self._head_bytes += len(data)
        else:
            self._head_bytes = 0
        if self._head_bytes > MAX_HEAD_BYTES + HEAD_SLACK_BYTES:
            self._refuse(431, f"request head exceeds {MAX_HEAD_BYTES} bytes")

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._heads_ended += 1
        self._disarm_head_deadline()
        version = self.parser.get_http_version()
        if version not in ("1.0", "1.1"):  # llhttp takes a line without a version as HTTP/0.9
            status = 400 if version == "0.9" else 505
            self._refuse(status, f"HTTP/{version} is not served (use HTTP/1.1)")
            return
        if self._fast_match is not None and version == "1.1":
            self._fast = self._fast_request(self._fast_match)
            if self._fast is not None:
                return
        super().on_headers_complete()
        if self.cycle is not None and self.cycle.transport is self.transport:
            self.cycle.transport = _HeadWithBody(self.transport)  # type: ignore[assignment]

    def _fast_request(self, endpoint: _MatchEndpoint) -> _FastRequest | None:
        """The request as one the protocol answers itself, or None for the ASGI path."""
        if (
            self.parser.get_method() != b"POST"
            or self.expect_100_continue
            or self.parser.should_upgrade()
            or self.pipeline
            or (self.cycle is not None and not self.cycle.response_complete)
            or self.flow.write_paused
        ):
            return None
        path, _, query_string = self.url.partition(b"?")
        if path != _MATCH_PATH:
            return None
        content_type: str | None = None
        length: bytes | None = None
        for name, value in self.headers:
            if name == b"content-length":
                if length is not None:
                    return None
                length = value
            elif name == b"content-type":
                content_type = value.decode("latin-1")
            elif name == b"transfer-encoding":
                return None
        if length is None or not length.isdigit() or int(length) > endpoint.limit_bytes:
            return None
        if _head_bytes(len(path) + len(query_string), self.headers) > MAX_HEAD_BYTES:
            return None
        return _FastRequest(content_type, query_string, self.parser.should_keep_alive(), [])

    def on_body(self, body: bytes) -> None:
        if self._refused:
            return
        if self._fast is not None:
            self._fast.parts.append(body)
            return
        super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        self._in_head = True  # what comes next is the next request's head
        self._head_bytes = 0
        fast, self._fast = self._fast, None
        if fast is not None:
            self._answer(fast)
            return
        super().on_message_complete()
        if self.cycle is not None and self.cycle.response_complete:
            self._arm_head_deadline()  # answered before its body ended: the next head's turn

    def _answer(self, fast: _FastRequest) -> None:
        """Send the answer to ``fast`` in one write, then what uvicorn does after a response."""
        assert self._fast_match is not None
        keep_alive = fast.keep_alive
        try:
            status, body = self._fast_match.respond(
                fast.content_type, b"".join(fast.parts), fast.query_string
            )
        except Exception:
            logger.exception("POST /v1/match failed")
            status, body, keep_alive = 500, _error_body("internal error"), False
        self.transport.write(
            _response_bytes(
                status,
                b"application/json",
                body,
                close=not keep_alive,
                headers=self.server_state.default_headers,
            )
        )
        if not keep_alive:
            self.transport.close()
        self.on_response_complete()

    def on_response_complete(self) -> None:
        if self.cycle is not None and isinstance(self.cycle.transport, _HeadWithBody):
            self.cycle.transport.flush()
        super().on_response_complete()
        if not self.transport.is_closing() and self._in_head:
            self._arm_head_deadline()  # the next request on this connection

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_deadline()
        super().connection_lost(exc)

    def _refuse(self, status: int, reason: str) -> None:
        """Answer ``status`` with ``reason`` and close, reading nothing more."""
        self._refused = True
        message = (reason + "\n").encode()
        self.transport.write(
            _response_bytes(status, b"text/plain; charset=utf-8", message, close=True)
        )
        self.transport.close()

    def _arm_head_deadline(self) -> None:
        self._disarm_head_deadline()
        self._head_deadline = self.loop.call_later(HEAD_TIMEOUT_S, self._head_timed_out)

    def _disarm_head_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_timed_out(self) -> None:
        self._head_deadline = None
        if self._in_head and not self.transport.is_closing():
            self.transport.close()


class _HeadWithBody:
    """The transport as a response sees it: the response head is held back and leaves with the
    first body bytes (or when the response ends), so a small response is one send and one
    segment, and the client wakes once instead of twice. ``100 Continue`` goes at once."""

    __slots__ = ("_held", "_transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        if self._held is not None:
            self._transport.write(self._held + data)
            self._held = None
        elif data.startswith(b"HTTP/1.1 100 "):
            self._transport.write(data)
        elif data.startswith(b"HTTP/"):
            self._held = data
        else:
            self._transport.write(data)

    def flush(self) -> None:
        """Send what is held."""
        if self._held is not None:
            self._transport.write(self._held)
            self._held = None

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()


class _QuietServer(uvicorn.Server):
    """A uvicorn server that leaves signals to its host (the CLI cancels the task group)."""

    def install_signal_handlers(self) -> None:  # uvicorn < 0.29
        return

    def capture_signals(self) -> Any:  # uvicorn >= 0.29: a context manager
        return nullcontext()


def _protocol_class(match: _MatchEndpoint | None) -> type[_BoundedHeadProtocol]:
    """The protocol serving an app whose ``/v1/match`` handler is ``match`` (None: none)."""
    if match is None:
        return _BoundedHeadProtocol

    class _MatchingProtocol(_BoundedHeadProtocol):
        _fast_match = match

    return _MatchingProtocol


def bind_listener(host: str, port: int, backlog: int = 128) -> socket.socket:
    """A listening TCP socket on ``host:port`` (0: any free port) for uvicorn to serve.

    The protocol is named (``IPPROTO_TCP``, not the default 0): asyncio turns on TCP_NODELAY
    only for connections accepted from a socket whose ``proto`` says TCP. Without it Nagle
    holds back the response body (headers and body are written separately) until the client's
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
    """Serves ``app`` on ``host:port`` until the context exits (an async context manager).

    ``hot_route`` (default on): the connection protocol itself answers a plain
    ``POST /v1/match`` of an app made by ``build_app``; off, every request goes through ASGI
    (the answers are the same bytes; the benchmark compares the two).
    """

    def __init__(
        self, app: ASGIApp, *, host: str = "127.0.0.1", port: int = 0, hot_route: bool = True
    ) -> None:
        self._app = app
        self._hot_route = hot_route
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

    def _hot_match(self) -> _MatchEndpoint | None:
        if self._hot_route and isinstance(self._app, _App):
            return self._app.match_endpoint
        return None

    async def __aenter__(self) -> Self:
        sock = bind_listener(self._host, self._requested_port)
        self._port = int(sock.getsockname()[1])
        config = uvicorn.Config(
            self._app,
            lifespan="off",
            log_level="warning",
            access_log=False,
            http=_protocol_class(self._hot_match()),
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
