"""The bounds every connection of the service's HTTP server is held to (``HttpLimits``), and
what the connections of one server share (``ServerState``): ``BoundedConnection``, the base of
the connection protocol (``http_protocol.HttpConnection``), which adds HTTP to it.

Hostile clients are bounded: a connection that has not delivered a complete request head
``head_timeout_s`` after it opened (or after its previous response) is answered 408 and closed,
however slowly it trickles bytes (one that sent nothing is closed silently); a request whose
body is not complete ``body_timeout_s`` after its head is answered 408 and closed; a connection
idle ``keep_alive_timeout_s`` after a response is closed; a connection past ``max_connections``
open at once is answered 503 and closed as it opens. Each refusal is counted in the server's
HTTP metrics (``http_metrics``). While a request is being answered no deadline runs (the app's
time is not bounded here).

The deadlines share one timer per connection: the connection notes what it waits for
(``IDLE``, ``IN_HEAD``, ``IN_BODY``, ``ANSWERING``) and until when, and the timer is replaced
only when it would fire too late; firing early, it re-arms for the rest. So a request costs no
timer of its own, only the reading of the loop's clock after its answer.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Final, cast

from starlette.types import ASGIApp

from swa_es.service.http_app import MatchEndpoint
from swa_es.service.http_auth import BearerTokens
from swa_es.service.http_cycle import date_line, response_bytes
from swa_es.service.http_limits import HttpLimits
from swa_es.service.http_metrics import SLOW_BODY, SLOW_HEAD, TOO_MANY_CONNECTIONS, HttpMetrics

_TEXT: Final = b"text/plain; charset=utf-8"
_TIMER_SLACK_S: Final = 0.001
"""A deadline timer firing this early (timer granularity) counts as on time."""
# what a connection waits for, and so what its deadline means
IDLE: Final = 0
"""A request head, none begun: close silently at the deadline."""
IN_HEAD: Final = 1
"""The rest of a begun request head: 408 at the deadline."""
IN_BODY: Final = 2
"""The rest of a request body: 408 at the deadline."""
ANSWERING: Final = 3
"""An answer: no deadline."""


@dataclass(slots=True, eq=False)
class ServerState:
    """What the connections of one server share: what they serve and how (set by
    ``http_server.HttpServer``), and the connections and app tasks open now."""

    app: ASGIApp
    """The ASGI app (behind ``GuardedApp`` where tokens are asked)."""
    match: MatchEndpoint | None = None
    """The hot route's endpoint (None: every request through ASGI)."""
    metrics: HttpMetrics | None = None
    """Where the protocol's own refusals are counted (None: not counted)."""
    limits: HttpLimits = field(default_factory=HttpLimits)
    tokens: BearerTokens | None = None
    """The bearer tokens the hot route accepts (None: none asked)."""
    tls: bool = False
    date_line: bytes = field(default_factory=date_line)
    """The ``date`` header line of every response, kept current by the server."""
    connections: set[BoundedConnection] = field(default_factory=set)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    stopping: bool = False
    """Set when the server stops: each connection closes after its current answer."""
    all_closed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the last connection closes while ``stopping``."""


class BoundedConnection(asyncio.Protocol):
    """A connection under its server's bounds (see the module docstring). The subclass says
    what it waits for (``_due``, ``_await_head``), what a stalled body means
    (``_body_timed_out``) and which requests are lost when it closes (``_lose_cycles``)."""

    __slots__ = (
        "_closed",
        "_deadline",
        "_head_due",
        "_limits",
        "_loop",
        "_phase",
        "_refused",
        "_state",
        "_timer",
        "_timer_at",
        "_transport",
    )

    def __init__(self, state: ServerState) -> None:
        self._state = state
        self._limits = state.limits
        self._loop = asyncio.get_running_loop()
        self._transport = cast(asyncio.Transport, None)  # set by connection_made
        self._refused = False  # answered by the server and closing: what it sends is ignored
        self._closed = False
        self._phase = IDLE
        self._deadline: float | None = None
        self._head_due = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        connections = self._state.connections
        connections.add(self)
        limit = self._limits.max_connections
        if len(connections) > limit:
            self._refuse(503, f"more than {limit} connections open", TOO_MANY_CONNECTIONS)
            return
        if self._state.stopping:
            self._close()
            return
        self._head_due = self._loop.time() + self._limits.head_timeout_s
        self._due(IDLE, self._head_due)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._lose_cycles()
        state = self._state
        state.connections.discard(self)
        if state.stopping and not state.connections:
            state.all_closed.set()

    def shutdown(self) -> None:
        """The server stops: close once what is being answered is (here: at once)."""
        self._close()

    def abort(self) -> None:
        """Close at once, whatever is being answered (the end of a server's grace)."""
        self._refused = True
        self._lose_cycles()
        self._transport.abort()

    def _await_head(self, *, begun: bool) -> None:
        """An answer is complete: the next request head is due within the head timeout, and
        one not ``begun`` within the keep-alive timeout."""
        now = self._loop.time()
        self._head_due = now + self._limits.head_timeout_s
        if begun:
            self._due(IN_HEAD, self._head_due)
        else:
            self._due(IDLE, min(now + self._limits.keep_alive_timeout_s, self._head_due))

    def _due(self, phase: int, at: float) -> None:
        """Wait for ``phase``'s input until ``at`` (loop time)."""
        self._phase = phase
        self._deadline = at
        timer = self._timer
        if timer is None or at < self._timer_at:
            if timer is not None:
                timer.cancel()
            self._timer = self._loop.call_at(at, self._deadline_passed)
            self._timer_at = at

    def _answering(self) -> None:
        """Wait for an answer: no deadline."""
        self._phase = ANSWERING
        self._deadline = None

    def _deadline_passed(self) -> None:
        self._timer = None
        at = self._deadline
        if at is None or self._closed or self._refused:
            return
        if self._loop.time() < at - _TIMER_SLACK_S:
            self._timer = self._loop.call_at(at, self._deadline_passed)
            self._timer_at = at
            return
        self._deadline = None
        if self._phase == IDLE:
            self._close()  # nothing sent since: an idle connection, not a refusal
        elif self._phase == IN_HEAD:
            timeout_s = self._limits.head_timeout_s
            self._refuse(408, f"request head not complete within {timeout_s} s", SLOW_HEAD)
        elif self._phase == IN_BODY:
            self._body_timed_out()

    def _body_timed_out(self) -> None:
        """A request body is not complete in time: 408."""
        timeout_s = self._limits.body_timeout_s
        self._refuse(408, f"request body not complete within {timeout_s} s", SLOW_BODY)

    def _refuse(self, status: int, reason: str, counted_as: str | None) -> None:
        """Answer ``status`` with ``reason`` and close, reading nothing more; counted as a
        refusal for ``counted_as`` (None: not counted)."""
        self._count(status, counted_as)
        self._lose_cycles()  # what the app sends from now on goes nowhere
        self._transport.write(refusal_bytes(status, reason))
        self._close()

    def _count(self, status: int, counted_as: str | None) -> None:
        metrics = self._state.metrics
        if metrics is not None and counted_as is not None:
            metrics.refused_early(status, counted_as)

    def _close(self) -> None:
        self._refused = True
        self._transport.close()
        self._lose_cycles()

    def _lose_cycles(self) -> None:
        """Tell the requests being answered that the connection is gone."""


def refusal_bytes(status: int, reason: str) -> bytes:
    """The whole response refusing a request with ``status`` and the text ``reason``."""
    return response_bytes(status, _TEXT, (reason + "\n").encode(), close=True)
