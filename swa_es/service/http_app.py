"""The ASGI app of ``serve``, ``follow`` and ``bridge``: what each route answers.

``build_app`` makes the app: ``/metrics`` (prometheus_client exposition of a registry),
``/healthz`` (503 with the reason while unhealthy, e.g. restoring), ``/readyz`` where the
service judges readiness (``AppParts.readiness``: 503 with a JSON document until ready), and,
on a follower, the routing API: ``POST /v1/match`` and ``GET /v1/sources`` (and prediction
quality, ``feedback``: ``POST /v1/feedback``, ``GET /v1/quality``). ``POST /v1/match``
is a router's hot path, so it is served by a plain ASGI handler (``MatchEndpoint``: no
framework routing, request or response objects); the other routes go through Starlette. The
bodies it accepts are those of ``match_query``. A request head over ``MAX_HEAD_BYTES`` gets 431.

The connection protocol that serves the app (its bounds on heads, and the hot route answered
without ASGI) is ``http_protocol``; the server that binds and runs both is ``http_server``.

Every answer is counted in the registry's HTTP metrics (``http_metrics``: requests by route and
status, durations, refusals by reason): here for what goes through ASGI, in the protocol for
the hot route it answers itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from swa_es.client.packed_answers import PACKED_ANSWERS, AnswerRows
from swa_es.service.feedback import feedback_routes
from swa_es.service.http_metrics import MATCH_ROUTE, HttpMetrics, http_metrics_of, route_of
from swa_es.service.match_query import (
    BadRequestError,
    Query,
    UnsupportedMediaError,
    parse_body,
)
from swa_es.service.ui import ui_routes

DEFAULT_MAX_REQUEST_BYTES: Final = 4 * 1024 * 1024
MAX_HEAD_BYTES: Final = 8 * 1024
"""The largest request line plus headers served (nginx's default header buffer)."""

CheckHealth = Callable[[], tuple[bool, str]]
CheckReadiness = Callable[[], tuple[bool, dict[str, Any]]]
"""``/readyz``: whether the service is ready, and the JSON document answered (a follower's:
``consumers.readiness``)."""
SourceAnswers = dict[str, dict[str, Any]]
Reply = tuple[int, bytes, bytes]
"""An HTTP status, its body and the body's media type."""
JSON_TYPE: Final = b"application/json"
_PACKED_TYPE: Final = PACKED_ANSWERS.encode("ascii")


class RoutingBackend(Protocol):
    """What the routing API reads (a follower service provides it)."""

    def answer(self, query: Query) -> SourceAnswers:
        """Per source: ``cached_tokens``, ``usable_tokens`` and ``state``."""
        ...

    def answer_rows(self, query: Query) -> AnswerRows:
        """``answer`` as the rows of the binary reply."""
        ...

    def as_of(self) -> dict[str, Any]:
        """What the answers reflect: log position, lag, each source's last batch."""
        ...

    def as_of_json(self) -> bytes:
        """``as_of()`` as JSON text."""
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
    readiness: CheckReadiness | None = None
    """``GET /readyz`` (None: no such route): 200 when ready, else 503, with its document."""


_CLOSE: Final = [(b"connection", b"close")]


async def _reply(
    send: Send,
    status: int,
    body: bytes,
    headers: Sequence[tuple[bytes, bytes]] = (),
    media: bytes = JSON_TYPE,
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", media),
                (b"content-length", b"%d" % len(body)),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def wants_packed(accept: bytes | None) -> bool:
    """Whether an ``Accept`` header asks for the binary reply
    (``swa_es.client.packed_answers``): one of its media ranges names it, without ``q=0``."""
    if accept is None:
        return False
    if accept == _PACKED_TYPE:
        return True
    for media_range in accept.lower().split(b","):
        kind, *parameters = media_range.split(b";")
        if kind.strip() != _PACKED_TYPE:
            continue
        return not any(_refuses(parameter) for parameter in parameters)
    return False


def _refuses(parameter: bytes) -> bool:
    """Whether a media range's parameter is a quality of 0 (``q=0``, ``q=0.000``)."""
    name, _, value = parameter.partition(b"=")
    return name.strip() == b"q" and value.strip().rstrip(b"0").rstrip(b".") in (b"0", b"")


def error_body(message: str) -> bytes:
    """The JSON body of an error answer: ``{"error": message}``."""
    return orjson.dumps({"error": message})


async def _error(
    send: Send, status: int, message: str, headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    await _reply(send, status, error_body(message), headers)


class MatchEndpoint:
    """``POST /v1/match`` as a plain ASGI handler (the hot path of a router)."""

    def __init__(
        self, parts: AppParts, routing: RoutingBackend, metrics: HttpMetrics | None = None
    ) -> None:
        self._routing = routing
        self._health = parts.health
        self._limit_bytes = parts.max_request_bytes
        self.metrics = http_metrics_of(parts.registry) if metrics is None else metrics
        """Where the protocol counts the answers it sends itself (default: the registry's)."""

    @property
    def limit_bytes(self) -> int:
        """The largest body served."""
        return self._limit_bytes

    def respond(
        self, content_type: str | None, body: bytes, query_string: bytes, packed: bool = False
    ) -> Reply:
        """The status, body and its type answering one whole request (no I/O: the protocol's
        fast path and the ASGI handler both send what this returns). ``packed``: the client
        asked for the binary reply (given to a single prompt; a batch and errors are JSON)."""
        try:
            parsed = parse_body(content_type, body, query_string)
        except BadRequestError as exc:
            return 400, error_body(str(exc)), JSON_TYPE
        except UnsupportedMediaError as exc:
            return 415, error_body(str(exc)), JSON_TYPE
        healthy, detail = self._health()
        if not healthy:
            return 503, error_body(detail), JSON_TYPE
        routing = self._routing
        if parsed.batch:
            answers = [{"sources": routing.answer(query)} for query in parsed.queries]
            return 200, orjson.dumps({"answers": answers, "as_of": routing.as_of()}), JSON_TYPE
        if packed:
            rows = routing.answer_rows(parsed.queries[0])
            return 200, rows.frame(routing.as_of_json()), _PACKED_TYPE
        document = {"sources": routing.answer(parsed.queries[0]), "as_of": routing.as_of()}
        return 200, orjson.dumps(document), JSON_TYPE

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            await _error(send, 405, "use POST", [(b"allow", b"POST")])
            return
        content_type: str | None = None
        declared: bytes | None = None
        accept: bytes | None = None
        for name, value in scope["headers"]:
            if name == b"content-type":
                content_type = value.decode("latin-1")
            elif name == b"content-length":
                declared = value
            elif name == b"accept":
                accept = value
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
        status, reply, media = self.respond(
            content_type, body, scope["query_string"], wants_packed(accept)
        )
        await _reply(send, status, reply, media=media)

    async def _too_large(self, send: Send, size: int) -> None:
        # the rest of the body is not read: close the connection rather than drain it
        await _error(send, 413, f"body of {size} bytes exceeds {self._limit_bytes}", _CLOSE)


def head_bytes(target_bytes: int, headers: Iterable[tuple[bytes, bytes]]) -> int:
    """The size a request head is held to (``MAX_HEAD_BYTES``): its target and headers."""
    return target_bytes + sum(len(name) + len(value) + 4 for name, value in headers)


class ServiceApp:
    """The service's ASGI app: 431 for oversized heads, ``/v1/match`` straight to its handler,
    everything else through Starlette; each answer counted in ``metrics``."""

    def __init__(
        self, framework: ASGIApp, match: MatchEndpoint | None, metrics: HttpMetrics
    ) -> None:
        self._framework = framework
        self._match = match
        self._metrics = metrics

    @property
    def metrics(self) -> HttpMetrics:
        """Where its answers are counted."""
        return self._metrics

    @property
    def match_endpoint(self) -> MatchEndpoint | None:
        """The ``/v1/match`` handler (None: no routing API)."""
        return self._match

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._framework(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0

        async def counted_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self._answer(scope, receive, counted_send)
        except Exception:
            status = status or 500  # the server answers 500 for an app that raised
            raise
        finally:
            if status:
                self._metrics.answered(
                    route_of(scope["path"]), status, time.perf_counter() - started
                )

    async def _answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        target = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
        size = head_bytes(target, scope["headers"])
        if size > MAX_HEAD_BYTES:
            response = PlainTextResponse(
                f"request head of {size} bytes exceeds {MAX_HEAD_BYTES}\n", status_code=431
            )
            await response(scope, receive, send)
            return
        if self._match is not None and scope["path"] == MATCH_ROUTE:
            await self._match(scope, receive, send)
            return
        await self._framework(scope, receive, send)


def readyz_route(readiness: CheckReadiness) -> Route:
    """``GET /readyz``: 200 when ``readiness`` says ready, else 503; its JSON document."""

    async def readyz(request: Request) -> Response:
        ready, document = readiness()
        status = 200 if ready else 503
        return Response(orjson.dumps(document), status, media_type="application/json")

    return Route("/readyz", readyz, methods=["GET"])


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
    if parts.readiness is not None:
        routes.append(readyz_route(parts.readiness))
    http = http_metrics_of(parts.registry)
    match = None
    if parts.routing is not None:
        routes.append(Route("/v1/sources", sources, methods=["GET"]))
        routes.extend(  # prediction quality: POST /v1/feedback, GET /v1/quality
            feedback_routes(parts.registry, parts.routing, parts.health, parts.max_request_bytes)
        )
        routes.extend(ui_routes(parts.health, parts.routing, http, parts.readiness))  # /ui
        match = MatchEndpoint(parts, parts.routing, http)
    return ServiceApp(Starlette(routes=routes), match, http)
