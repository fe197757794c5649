"""The connection protocol of the service's HTTP/1.1 server (``http_server``): one
``HttpConnection`` (an ``asyncio.Protocol``) per client connection, parsing requests with
``httptools.HttpRequestParser``, answering them through ASGI (``http_cycle.AsgiCycle``, one
request at a time, in order) and the routing API's hot route (``POST /v1/match``) in the
protocol itself, under the bounds of ``HttpLimits``.

Flow of a connection: the parser's callbacks gather a request head; when it is complete the
request is either a hot one (below) or an ``AsgiCycle``, whose app task starts at once when
nothing else on the connection is being answered, else waits in a queue (pipelined requests;
reading pauses until their turn). The body goes to the cycle as it arrives; reading pauses
while the app has more than ``BODY_HIGH_WATER_BYTES`` of it unread, and a response waits while
the transport's write buffer is over its high-water mark (``pause_writing``). When a response is
complete the next queued request starts; the connection closes after a response that said
``connection: close`` (or the client's EOF, or the server stopping).

Its bounds (``http_bounds.BoundedConnection``, its base): a request head still unfinished
``HEAD_SLACK_BYTES`` past ``MAX_HEAD_BYTES`` gets 431 (and the protocol never buffers much more
of one); deadlines on heads, bodies and idle connections; a cap on connections. Unparsable
requests get 400, HTTP versions other than 1.0 and 1.1 400 (0.9) or 505, and close the
connection (after the answers to the requests before them).

Hot route (``http_hot_route``): a plain ``POST /v1/match``, with nothing before it still being
answered and the client reading its replies, is answered as soon as its body is complete, in
one write, without ASGI; every other request takes the ASGI path, which answers the same bytes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any, Final

import httptools

from swa_es.service.http_app import MAX_HEAD_BYTES
from swa_es.service.http_bounds import (
    IDLE,
    IN_BODY,
    IN_HEAD,
    BoundedConnection,
    ServerState,
    refusal_bytes,
)
from swa_es.service.http_cycle import AsgiCycle, asgi_scope, expects_continue
from swa_es.service.http_hot_route import HotRequest, hot_reply, hot_request
from swa_es.service.http_limits import BODY_TIMEOUT_S as BODY_TIMEOUT_S
from swa_es.service.http_limits import HEAD_TIMEOUT_S as HEAD_TIMEOUT_S
from swa_es.service.http_limits import KEEP_ALIVE_TIMEOUT_S as KEEP_ALIVE_TIMEOUT_S
from swa_es.service.http_limits import MAX_CONNECTIONS as MAX_CONNECTIONS
from swa_es.service.http_limits import HttpLimits as HttpLimits
from swa_es.service.http_metrics import MATCH_ROUTE, SLOW_BODY

logger = logging.getLogger(__name__)

HEAD_SLACK_BYTES: Final = 1024
"""How far past ``MAX_HEAD_BYTES`` an unfinished head may grow before the connection is cut."""


class HttpConnection(BoundedConnection):
    """One client connection of the server (see the module docstring)."""

    __slots__ = (
        "_active",
        "_addresses",
        "_current",
        "_drain_waiters",
        "_eof",
        "_final",
        "_head_begun",
        "_head_bytes",
        "_headers",
        "_heads_ended",
        "_hot",
        "_in_head",
        "_parser",
        "_queue",
        "_read_paused",
        "_url",
        "_write_paused",
    )

    def __init__(self, state: ServerState) -> None:
        super().__init__(state)
        self._parser = httptools.HttpRequestParser(self)
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._addresses: tuple[Any, Any] | None = None
        self._in_head = True  # the parser is between requests or inside a head
        self._head_begun = False
        self._head_bytes = 0
        self._heads_ended = 0
        self._eof = False
        self._hot: HotRequest | None = None
        self._current: AsgiCycle | None = None  # the request whose body is arriving
        self._active: AsgiCycle | None = None  # the request being answered
        self._queue: deque[AsgiCycle] = deque()  # requests waiting for their turn
        self._final: bytes | None = None  # a refusal written once the queue is answered
        self._read_paused = False
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []

    # --- asyncio.Protocol -----------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        # A chunk counts toward the head only when it began inside a head and no head ended in
        # it; one where the next head begins (after a head or a body ended) restarts the count,
        # so the bound is this limit plus one read.
        was_in_head = self._in_head
        self._heads_ended = 0
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._upgrade_asked()
            return
        except httptools.HttpParserCallbackError:
            logger.exception("serving a request failed")  # a bug here, not the client's
            if not self._refused:
                self._refuse_in_turn(500, "internal error", None)
            return
        except httptools.HttpParserError as exc:
            if not self._refused:
                logger.debug("an unparsable request: %s", exc)
                self._refuse_in_turn(400, "invalid HTTP request", None)
            return
        if self._refused or self._transport.is_closing():
            return
        if not self._in_head:
            if self._phase != IN_BODY:  # a body still to come (one sent with its head: no timer)
                self._due(IN_BODY, self._loop.time() + self._limits.body_timeout_s)
            return
        if was_in_head and self._heads_ended == 0:
            self._head_bytes += len(data)
        else:
            self._head_bytes = 0
        if self._head_bytes > MAX_HEAD_BYTES + HEAD_SLACK_BYTES:
            reason = f"request head exceeds {MAX_HEAD_BYTES} bytes"
            self._refuse_in_turn(431, reason, "head_too_large")

    def eof_received(self) -> bool:
        self._eof = True
        # Keep the transport open to answer what was received whole, unless nothing is being
        # answered, a request is cut short, or TLS (which cannot half-close).
        nothing_to_answer = self._active is None and not self._queue
        cut_short = self._current is not None or self._hot is not None
        return not (self._state.tls or nothing_to_answer or cut_short)

    def connection_lost(self, exc: Exception | None) -> None:
        self._hot = None
        super().connection_lost(exc)
        self._wake_writers()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_writers()

    # --- the parser's callbacks -----------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = []
        self._head_begun = True
        if self._phase == IDLE:
            self._due(IN_HEAD, self._head_due)

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        # llhttp keeps trailing whitespace, which is no part of a field value (RFC 9110 5.5)
        self._headers.append((name.lower(), value.rstrip(b" \t")))

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_begun = False
        self._heads_ended += 1
        self._answering()
        if self._refused:
            return
        version = self._parser.get_http_version()
        if version != "1.1" and version != "1.0":  # llhttp reads a line without one as 0.9
            status = 400 if version == "0.9" else 505
            reason = f"HTTP/{version} is not served (use HTTP/1.1)"
            self._refuse_in_turn(status, reason, "bad_version")
            return
        state = self._state
        match = state.match
        if (
            match is not None
            and version == "1.1"
            and self._active is None
            and not self._queue
            and not self._write_paused
        ):
            hot = hot_request(self._parser, self._url, self._headers, match, state.tokens)
            if hot is not None:
                self._hot = hot
                return
        self._asgi_request(version)

    def on_body(self, body: bytes) -> None:
        if self._refused:
            return
        hot = self._hot
        if hot is not None:
            hot.parts.append(body)
            return
        cycle = self._current
        if cycle is not None and cycle.feed(body):
            self._pause_reading()

    def on_message_complete(self) -> None:
        if self._refused:
            return
        self._in_head = True  # what comes next is the next request's head
        self._head_bytes = 0
        hot = self._hot
        if hot is not None:
            self._hot = None
            self._answer(hot)
            return
        cycle, self._current = self._current, None
        self._answering()
        if cycle is not None:
            cycle.end_body()
            if cycle.complete:  # answered before its body ended: the next head's turn
                self._after_answer()

    # --- the hot route and the ASGI path ---------------------------------------------------

    def _answer(self, hot: HotRequest) -> None:
        """Send the answer to ``hot`` in one write."""
        state = self._state
        endpoint = state.match
        assert endpoint is not None
        keep_alive = hot.keep_alive and not state.stopping
        status, data, keep_alive = hot_reply(endpoint, hot, state.date_line, keep_alive=keep_alive)
        self._transport.write(data)
        if not keep_alive:
            self._close()
        endpoint.metrics.answered(MATCH_ROUTE, status, time.perf_counter() - hot.started)
        self._after_answer()

    def _asgi_request(self, version: str) -> None:
        if self._addresses is None:
            transport = self._transport
            server = transport.get_extra_info("sockname")
            client = transport.get_extra_info("peername")
            self._addresses = (
                tuple(server[:2]) if server else None,
                tuple(client[:2]) if client else None,
            )
        parser, state, headers = self._parser, self._state, self._headers
        server_address, client_address = self._addresses
        scope = asgi_scope(
            parser.get_method(),
            self._url,
            version,
            headers,
            tls=state.tls,
            server=server_address,
            client=client_address,
        )
        if scope is None:
            self._refuse_in_turn(400, "invalid request target", None)
            return
        cycle = AsgiCycle(
            scope,
            self,
            self._transport,
            keep_alive=parser.should_keep_alive() and not state.stopping,
            expect_continue=expects_continue(headers),
            date_line=state.date_line,
        )
        self._current = cycle
        if self._active is None:
            self._start(cycle)
        else:
            self._queue.append(cycle)
            self._pause_reading()

    def _start(self, cycle: AsgiCycle) -> None:
        self._active = cycle
        tasks = self._state.tasks
        task = self._loop.create_task(cycle.run(self._state.app))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    # --- http_cycle.Connection --------------------------------------------------------------

    @property
    def write_paused(self) -> bool:
        """Whether the transport's write buffer is over its high-water mark."""
        return self._write_paused

    async def drain(self) -> None:
        """Wait until the transport takes writes again (or the connection is gone)."""
        if self._write_paused and not self._closed:
            waiter = self._loop.create_future()
            self._drain_waiters.append(waiter)
            await waiter

    def resume_reading(self) -> None:
        """Read again (paused for a body the app had not read), unless requests wait."""
        if self._read_paused and not self._queue and not self._transport.is_closing():
            self._read_paused = False
            self._transport.resume_reading()

    def response_done(self, cycle: AsgiCycle) -> None:
        """``cycle``'s response is complete: start the next request's, or wait for one."""
        self._active = None
        if self._transport.is_closing():
            return
        queue = self._queue
        if queue:
            if self._state.stopping:
                self._close()
                return
            self._start(queue.popleft())
            if not queue:
                self.resume_reading()
            return
        if self._final is not None:
            self._transport.write(self._final)
            self._close()
            return
        self.resume_reading()
        self._after_answer()

    def shutdown(self) -> None:
        """The server stops: close now if nothing is being answered, else after the answer."""
        if self._active is None and self._hot is None and not self._queue:
            self._close()
        elif self._active is not None:
            self._active.keep_alive = False

    # --- the connection's state ------------------------------------------------------------

    def _after_answer(self) -> None:
        """A response is complete and nothing waits: close, or wait for the next head."""
        if self._transport.is_closing():
            return
        if self._eof or self._state.stopping:
            self._close()
        elif self._in_head:  # else the body of the request answered is still arriving
            self._await_head(begun=self._head_begun)

    def _body_timed_out(self) -> None:
        cycle = self._current
        if self._hot is None and (cycle is None or cycle is not self._active or cycle.started):
            # an answer is being written (or waited for) on this connection: close without one
            self._count(408, SLOW_BODY)
            self._close()
            return
        super()._body_timed_out()

    def _upgrade_asked(self) -> None:
        """A request asked to switch protocols: it is answered as a plain request (no other
        protocol is served), then the connection closes; what followed it is not read."""
        if self._refused:
            return
        self._refused = True
        self._pause_reading()
        last = self._queue[-1] if self._queue else self._active
        if last is None or last.complete:
            self._close()
        else:
            last.keep_alive = False

    def _refuse_in_turn(self, status: int, reason: str, counted_as: str | None) -> None:
        """``_refuse``, after the answers to the requests before this one."""
        active = self._active
        if active is None or (active is self._current and not active.started):
            self._refuse(status, reason, counted_as)
            return
        self._refused = True
        self._count(status, counted_as)
        self._pause_reading()
        if self._current is not None:
            self._close()  # a request cut short by the bad bytes can never be answered
            return
        self._final = refusal_bytes(status, reason)

    def _lose_cycles(self) -> None:
        for cycle in (self._active, self._current, *self._queue):
            if cycle is not None and not cycle.disconnected:
                cycle.lost()

    def _pause_reading(self) -> None:
        if not self._read_paused and not self._transport.is_closing():
            self._read_paused = True
            self._transport.pause_reading()

    def _wake_writers(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
