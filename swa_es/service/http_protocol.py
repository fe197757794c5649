"""The connection protocol serving the app of ``http_app``: uvicorn's httptools protocol with
bounds on request heads, and the routing API's hot route (``POST /v1/match``) answered in the
protocol itself.

Hostile clients are bounded: a request head still unfinished ``HEAD_SLACK_BYTES`` past
``MAX_HEAD_BYTES`` gets 431 (and the protocol never buffers much more of one), and a connection
that has not delivered a complete request head ``HEAD_TIMEOUT_S`` after it opened (or after its
previous response) is answered 408 and closed, however slowly it trickles bytes. A request whose
body is not complete ``BODY_TIMEOUT_S`` after its head is answered 408 and closed; a connection
idle after a response is closed after uvicorn's keep-alive timeout; a connection past
``MAX_CONNECTIONS`` open at once is answered 503 and closed as it opens. ``HttpLimits`` holds
these bounds (a server can set its own; declared in ``http_limits``, re-exported here).

This module subclasses uvicorn's ``HttpToolsProtocol`` and reads its attributes (``cycle``,
``pipeline``, ``flow``, ``server_state``, ``parser``, ``url``, ``headers``,
``expect_100_continue``), which are not uvicorn's public API. It is tested with the uvicorn
versions ``UVICORN_TESTED`` names; pyproject pins the same range, and a test fails on an installed
version outside it.

With bearer tokens (``http_auth``) the hot route checks the request's ``Authorization`` header
as it reads the head (one more header compared, one hash) and leaves a refused request to the
app, which answers and counts the refusal.

The hot route counts each answer it sends in the endpoint's HTTP metrics (``http_metrics``), as
the app does for the others, and so do the refusals this protocol makes itself where it serves
an app of ``build_app``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Final

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from swa_es.service.http_app import MAX_HEAD_BYTES, MatchEndpoint, error_body, head_bytes
from swa_es.service.http_auth import ACCEPTED, BearerTokens
from swa_es.service.http_limits import BODY_TIMEOUT_S as BODY_TIMEOUT_S
from swa_es.service.http_limits import HEAD_TIMEOUT_S as HEAD_TIMEOUT_S
from swa_es.service.http_limits import KEEP_ALIVE_TIMEOUT_S as KEEP_ALIVE_TIMEOUT_S
from swa_es.service.http_limits import MAX_CONNECTIONS as MAX_CONNECTIONS
from swa_es.service.http_limits import HttpLimits as HttpLimits
from swa_es.service.http_metrics import (
    MATCH_ROUTE,
    SLOW_BODY,
    SLOW_HEAD,
    TOO_MANY_CONNECTIONS,
    HttpMetrics,
)

logger = logging.getLogger(__name__)

UVICORN_TESTED: Final = ((0, 55), (0, 56))
"""The uvicorn releases this protocol is tested with: ``(major, minor)`` from, inclusive, to,
exclusive (pyproject's ``uvicorn>=0.55,<0.56``)."""
HEAD_SLACK_BYTES: Final = 1024
"""How far past ``MAX_HEAD_BYTES`` an unfinished head may grow before the connection is cut."""
_STATUS_LINES: Final = {
    status: b"HTTP/1.1 %d %s\r\n" % (status, HTTPStatus(status).phrase.encode("ascii"))
    for status in (200, 400, 408, 413, 415, 431, 500, 503, 505)
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
    started: float
    """``time.perf_counter()`` when its head was read."""


class _BoundedHeadProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with bounds on heads, bodies and connections, and the
    routing API's hot route answered in the protocol itself.

    Bounds (``_limits``, an ``HttpLimits``; each refusal counted in ``_metrics``): a head still
    unfinished after ``MAX_HEAD_BYTES + HEAD_SLACK_BYTES`` gets 431 and the connection is closed
    (the parser itself has no limit); a head must be complete ``head_timeout_s`` after the
    connection opened or the previous response ended, else 408 (uvicorn's own idle timer stops
    at the first byte, so a client trickling a head would otherwise hold the connection
    forever); a body must be complete ``body_timeout_s`` after its head, else 408 (uvicorn has
    no such timer: a stalled body held the connection forever); a connection opened while
    ``max_connections`` are open gets 503. Each closes the connection.

    Hot route: a subclass made by ``protocol_class`` answers a plain ``POST /v1/match``
    (HTTP/1.1, a ``Content-Length`` within the limit, no ``Expect``, nothing before it still
    being answered, the client reading its replies, a known bearer token where the server
    asks for one: ``_tokens``) as soon as its body is complete, with the
    bytes of ``MatchEndpoint.respond`` in one write: no ASGI task, scope or messages. The
    answer is computed without awaiting anything either way, so only the per-request overhead
    goes. Every other request takes the ASGI path, which answers the same way.
    """

    _limits: HttpLimits = HttpLimits()
    _metrics: HttpMetrics | None = None
    _head_deadline: asyncio.TimerHandle | None = None
    _body_deadline: asyncio.TimerHandle | None = None
    _head_begun = False
    _in_head = True
    _head_bytes = 0
    _heads_ended = 0
    _refused = False
    _fast_match: MatchEndpoint | None = None
    _fast: _FastRequest | None = None
    _tokens: BearerTokens | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self._limits.max_connections:
            self._refuse(
                503,
                f"more than {self._limits.max_connections} connections open",
                TOO_MANY_CONNECTIONS,
            )
            return
        self._arm_head_deadline()

    def data_received(self, data: bytes) -> None:
        # A chunk counts toward the head only when it began inside a head and no head ended in
        # it; one where the next head begins (after a head or a body ended) restarts the count,
        # so the bound is this limit plus one read.
        was_in_head = self._in_head
        self._heads_ended = 0
        super().data_received(data)
        if self.transport.is_closing():
            return
        if not self._in_head:
            # A body still to come (armed here, not per request: a body that arrives with its
            # head costs no timer).
            if self._body_deadline is None:
                self._body_deadline = self.loop.call_later(
                    self._limits.body_timeout_s, self._body_timed_out
                )
            return
        if was_in_head and self._heads_ended == 0:
            self._head_bytes += len(data)
        else:
            self._head_bytes = 0
        if self._head_bytes > MAX_HEAD_BYTES + HEAD_SLACK_BYTES:
            self._refuse(431, f"request head exceeds {MAX_HEAD_BYTES} bytes", "head_too_large")

    def on_message_begin(self) -> None:
        self._head_begun = True
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_begun = False
        self._heads_ended += 1
        self._disarm_head_deadline()
        version = self.parser.get_http_version()
        if version not in ("1.0", "1.1"):  # llhttp takes a line without a version as HTTP/0.9
            status = 400 if version == "0.9" else 505
            self._refuse(status, f"HTTP/{version} is not served (use HTTP/1.1)", "bad_version")
            return
        if self._fast_match is not None and version == "1.1":
            self._fast = self._fast_request(self._fast_match)
            if self._fast is not None:
                return
        super().on_headers_complete()
        if self.cycle is not None and self.cycle.transport is self.transport:
            self.cycle.transport = _HeadWithBody(self.transport)  # type: ignore[assignment]

    def _fast_request(self, endpoint: MatchEndpoint) -> _FastRequest | None:
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
        authorization: bytes | None = None
        for name, value in self.headers:
            if name == b"content-length":
                if length is not None:
                    return None
                length = value
            elif name == b"content-type":
                content_type = value.decode("latin-1")
            elif name == b"authorization":
                if authorization is not None:
                    return None
                authorization = value
            elif name == b"transfer-encoding":
                return None
        if length is None or not length.isdigit() or int(length) > endpoint.limit_bytes:
            return None
        if head_bytes(len(path) + len(query_string), self.headers) > MAX_HEAD_BYTES:
            return None
        tokens = self._tokens
        if tokens is not None and tokens.verdict(authorization) != ACCEPTED:
            return None  # refused through ASGI (http_auth.GuardedApp), counted there
        return _FastRequest(
            content_type, query_string, self.parser.should_keep_alive(), [], time.perf_counter()
        )

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
        if self._body_deadline is not None:
            self._body_deadline.cancel()
            self._body_deadline = None
        fast, self._fast = self._fast, None
        if fast is not None:
            self._answer(fast)
            return
        super().on_message_complete()
        if self.cycle is not None and self.cycle.response_complete:
            self._arm_head_deadline()  # answered before its body ended: the next head's turn

    def _answer(self, fast: _FastRequest) -> None:
        """Send the answer to ``fast`` in one write, then what uvicorn does after a response."""
        endpoint = self._fast_match
        assert endpoint is not None
        keep_alive = fast.keep_alive
        try:
            status, body = endpoint.respond(
                fast.content_type, b"".join(fast.parts), fast.query_string
            )
        except Exception:
            logger.exception("POST /v1/match failed")
            status, body, keep_alive = 500, error_body("internal error"), False
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
        endpoint.metrics.answered(MATCH_ROUTE, status, time.perf_counter() - fast.started)
        self.on_response_complete()

    def on_response_complete(self) -> None:
        if self.cycle is not None and isinstance(self.cycle.transport, _HeadWithBody):
            self.cycle.transport.flush()
        super().on_response_complete()
        if not self.transport.is_closing() and self._in_head:
            self._arm_head_deadline()  # the next request on this connection

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_deadline()
        if self._body_deadline is not None:
            self._body_deadline.cancel()
            self._body_deadline = None
        super().connection_lost(exc)

    def _refuse(self, status: int, reason: str, counted_as: str) -> None:
        """Answer ``status`` with ``reason`` and close, reading nothing more; counted as a
        refusal for ``counted_as`` where this protocol serves the routing API."""
        self._refused = True
        if self._metrics is not None:
            self._metrics.refused_early(status, counted_as)
        message = (reason + "\n").encode()
        self.transport.write(
            _response_bytes(status, b"text/plain; charset=utf-8", message, close=True)
        )
        self.transport.close()

    def _arm_head_deadline(self) -> None:
        self._disarm_head_deadline()
        self._head_deadline = self.loop.call_later(
            self._limits.head_timeout_s, self._head_timed_out
        )

    def _disarm_head_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_timed_out(self) -> None:
        self._head_deadline = None
        if not self._in_head or self.transport.is_closing():
            return
        if self._head_begun:
            timeout_s = self._limits.head_timeout_s
            self._refuse(408, f"request head not complete within {timeout_s} s", SLOW_HEAD)
        else:
            self.transport.close()  # nothing sent since: an idle connection, not a refusal

    def _body_timed_out(self) -> None:
        self._body_deadline = None
        if self._in_head or self.transport.is_closing():
            return
        cycle = self.cycle
        if self._fast is None and (self.pipeline or cycle is None or cycle.response_started):
            # an answer is already being written on this connection: close without another
            self._refused = True
            if self._metrics is not None:
                self._metrics.refused_early(408, SLOW_BODY)
            self.transport.close()
            return
        timeout_s = self._limits.body_timeout_s
        self._refuse(408, f"request body not complete within {timeout_s} s", SLOW_BODY)


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


def protocol_class(
    match: MatchEndpoint | None,
    metrics: HttpMetrics | None = None,
    limits: HttpLimits | None = None,
    tokens: BearerTokens | None = None,
) -> type[_BoundedHeadProtocol]:
    """The protocol serving an app whose ``/v1/match`` handler is ``match`` (None: none, every
    request through ASGI), counting its refusals in ``metrics`` (None: ``match``'s, if any),
    under ``limits`` (None: the defaults). With ``tokens`` the hot route answers only a request
    with a known bearer token; any other goes through ASGI, where the app (``GuardedApp``)
    refuses it."""

    class _ServingProtocol(_BoundedHeadProtocol):
        _fast_match = match
        _metrics = metrics if metrics is not None or match is None else match.metrics
        _limits = HttpLimits() if limits is None else limits
        _tokens = tokens

    return _ServingProtocol
