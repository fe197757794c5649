"""One request answered through ASGI: the scope, ``receive`` and ``send`` of an app call, and
the HTTP/1.1 framing of its response (``AsgiCycle``); and the bytes of a whole response written
by the server itself (``response_bytes``).

The connection protocol (``http_protocol``) makes a cycle when a request head is complete,
feeds it the request body as it arrives (``feed``, ``end_body``) and starts its app task when
every earlier request on the connection has been answered; the cycle tells the connection when
its response is complete (``Connection.response_done``) or that it needs the reading resumed.

``receive()`` gives the body as ``http.request`` messages (what has arrived since the last one,
``more_body`` until the whole body was given), then waits until the connection is gone or the
response complete and gives ``http.disconnect``. The first ``receive()`` of a request that asked
``Expect: 100-continue`` writes ``HTTP/1.1 100 Continue`` before it waits for the body.

``send()`` frames the response: with the app's ``Content-Length`` as given (a body of another
length is the app's error), else chunked (``Transfer-Encoding: chunked``; on HTTP/1.0, delimited
by closing the connection); a response to ``HEAD`` (and 1xx, 204, 304) carries no body. The
head is held back and leaves with the first body bytes, so a small response is one write (one
segment: the client wakes once). ``connection: close`` is added when the connection will close
after the response (the client asked, HTTP/1.0 without keep-alive, the server is stopping, or
the app said so). While the transport's buffer is over its high-water mark, ``send`` waits for
it to drain. An app that raises before starting its response gets a 500 and the connection
closes; after starting, the connection closes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, Final, Protocol
from urllib.parse import unquote

import httptools
from starlette.types import ASGIApp, Message, Scope

from swa_es.service.errors import ServiceError

logger = logging.getLogger(__name__)

BODY_HIGH_WATER_BYTES: Final = 64 * 1024
"""A request body buffered past this, unread by the app, pauses reading from the connection."""
CONTINUE: Final = b"HTTP/1.1 100 Continue\r\n\r\n"


def _status_line(status: int) -> bytes:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""  # a status without a registered phrase
    return b"HTTP/1.1 %d %s\r\n" % (status, phrase.encode("ascii"))


STATUS_LINES: Final = {status: _status_line(status) for status in range(100, 600)}
"""``HTTP/1.1 STATUS PHRASE\\r\\n`` for every status."""
_NO_BODY_STATUSES: Final = frozenset({204, 304, *range(100, 200)})
_SERVER_ERROR: Final = b"Internal Server Error"
_FORBIDDEN_IN_HEADERS: Final = (b"\r", b"\n", b"\0")


class AppMessageError(ServiceError, RuntimeError):
    """An ASGI app sent a message the HTTP exchange cannot take (out of order, malformed, a
    body of another length than it declared); ``path`` names the request it answered."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"the app answering {path}: {problem}")


class Connection(Protocol):
    """What a cycle needs of the connection it answers on (``http_protocol.HttpConnection``)."""

    @property
    def write_paused(self) -> bool:
        """Whether the transport's write buffer is over its high-water mark."""
        ...

    async def drain(self) -> None:
        """Wait until the transport takes writes again (or the connection is gone)."""
        ...

    def resume_reading(self) -> None:
        """Read from the connection again (paused for a body the app had not read)."""
        ...

    def response_done(self, cycle: AsgiCycle) -> None:
        """``cycle``'s response is complete: the next request's turn."""
        ...


def response_bytes(
    status: int,
    content_type: bytes,
    body: bytes,
    *,
    close: bool,
    headers: Iterable[bytes] = (),
) -> bytes:
    """A whole HTTP/1.1 response: status line, ``headers`` (whole ``name: value\\r\\n`` lines),
    type, length, ``connection: close`` when ``close``, then the body."""
    head = [STATUS_LINES[status], *headers]
    head.append(b"content-type: %s\r\ncontent-length: %d\r\n" % (content_type, len(body)))
    if close:
        head.append(b"connection: close\r\n")
    head += (b"\r\n", body)
    return b"".join(head)


def asgi_scope(
    method: bytes,
    url: bytes,
    version: str,
    headers: list[tuple[bytes, bytes]],
    *,
    tls: bool,
    server: tuple[Any, ...] | None,
    client: tuple[Any, ...] | None,
) -> Scope | None:
    """The ASGI scope of a request (``url``: its target as received; ``headers``: names in
    lower case); None when the target has no path in ASCII (answered 400)."""
    try:
        target = httptools.parse_url(url)
    except httptools.HttpParserInvalidURLError:
        return None
    raw_path: bytes | None = target.path
    if raw_path is None or not raw_path.isascii():
        return None
    path = raw_path.decode("ascii")
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": version,
        "method": method.decode("ascii"),
        "scheme": "https" if tls else "http",
        "path": unquote(path) if "%" in path else path,
        "raw_path": raw_path,
        "query_string": target.query or b"",
        "root_path": "",
        "headers": headers,
        "client": client,
        "server": server,
    }


def expects_continue(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a request's ``headers`` ask ``Expect: 100-continue``."""
    return any(name == b"expect" and value.lower() == b"100-continue" for name, value in headers)


def date_line() -> bytes:
    """The ``date`` header line of a response sent now."""
    return b"date: %s\r\n" % formatdate(usegmt=True).encode("ascii")


class AsgiCycle:
    """One request on one connection, answered by an ASGI app (see the module docstring)."""

    __slots__ = (
        "_buffered",
        "_chunked",
        "_chunks",
        "_connection",
        "_continue_due",
        "_date_line",
        "_delivered",
        "_held_head",
        "_http10",
        "_more_body",
        "_no_body",
        "_remaining",
        "_transport",
        "_waiter",
        "complete",
        "disconnected",
        "keep_alive",
        "scope",
        "started",
    )

    def __init__(
        self,
        scope: Scope,
        connection: Connection,
        transport: asyncio.Transport,
        *,
        keep_alive: bool,
        expect_continue: bool,
        date_line: bytes,
    ) -> None:
        self.scope = scope
        self.keep_alive = keep_alive
        """Whether the connection stays open after this response (cleared to close it)."""
        self.started = False
        """Whether the response head was sent (given to ``send``)."""
        self.complete = False
        """Whether the whole response was written."""
        self.disconnected = False
        """Whether the connection is gone (or was closed by the server)."""
        self._connection = connection
        self._transport = transport
        self._date_line = date_line
        self._continue_due = expect_continue
        self._http10 = scope["http_version"] == "1.0"
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._more_body = True
        self._delivered = False
        self._waiter: asyncio.Future[None] | None = None
        self._held_head: bytes | None = None
        self._chunked = False
        self._no_body = False
        self._remaining: int | None = None

    # --- fed by the connection ------------------------------------------------------------

    def feed(self, body: bytes) -> bool:
        """Take request body bytes; whether the unread body is now past the high-water mark
        (the connection then pauses reading until the app reads)."""
        if self.complete or self.disconnected:
            return False  # answered already: the rest of the body is of no use
        self._chunks.append(body)
        self._buffered += len(body)
        self._wake()
        return self._buffered > BODY_HIGH_WATER_BYTES

    def end_body(self) -> None:
        """The request body is complete."""
        self._more_body = False
        self._wake()

    def lost(self) -> None:
        """The connection is gone: ``receive`` says ``http.disconnect``, ``send`` writes nothing."""
        self.disconnected = True
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # --- the app's side -------------------------------------------------------------------

    async def run(self, app: ASGIApp) -> None:
        """Call ``app`` for this request; an app error answered 500 (before its response
        started) or by closing the connection (after)."""
        try:
            await app(self.scope, self.receive, self.send)
        except asyncio.CancelledError:
            if not self.complete:
                self._close()
            raise
        except Exception:
            logger.exception("%s %s failed", self.scope["method"], self.scope["path"])
            self._after_failure()
        else:
            if not self.complete and not self.disconnected:
                state = "completing" if self.started else "starting"
                logger.error(
                    "%s %s: the app returned without %s its response",
                    self.scope["method"],
                    self.scope["path"],
                    state,
                )
                self._after_failure()

    def _after_failure(self) -> None:
        if self.disconnected or self.complete:
            return
        if self.started:
            self._close()
            return
        self.keep_alive = False
        headers = [(b"content-type", b"text/plain; charset=utf-8")]
        headers.append((b"content-length", b"%d" % len(_SERVER_ERROR)))
        self._start(500, headers)
        self._body(_SERVER_ERROR, more_body=False)

    async def receive(self) -> Message:
        """The next ``http.request`` message, or ``http.disconnect``."""
        if self._continue_due:
            self._continue_due = False
            if not self.disconnected and not self._transport.is_closing():
                self._transport.write(CONTINUE)
        while not (self.disconnected or self.complete):
            if self._chunks or not (self._more_body or self._delivered):
                return self._take()
            if self._more_body:
                self._connection.resume_reading()
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return {"type": "http.disconnect"}

    def _take(self) -> Message:
        chunks = self._chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._buffered = 0
        if not self._more_body:
            self._delivered = True
        return {"type": "http.request", "body": body, "more_body": self._more_body}

    async def send(self, message: Message) -> None:
        """Write the response message ``message`` (``http.response.start``, then
        ``http.response.body`` until ``more_body`` is false)."""
        if self._connection.write_paused and not self.disconnected:
            await self._connection.drain()
        if self.disconnected:
            return
        kind = message["type"]
        if not self.started:
            if kind != "http.response.start":
                raise AppMessageError(self.scope["path"], f"{kind} before http.response.start")
            self._start(message["status"], message.get("headers", ()))
        elif self.complete:
            raise AppMessageError(self.scope["path"], f"{kind} after the response was complete")
        elif kind != "http.response.body":
            raise AppMessageError(self.scope["path"], f"{kind} instead of http.response.body")
        else:
            self._body(message.get("body", b""), more_body=message.get("more_body", False))

    def _start(self, status: int, headers: Iterable[tuple[bytes, bytes]]) -> None:
        path = self.scope["path"]
        if status not in STATUS_LINES:
            raise AppMessageError(path, f"status {status!r} is no HTTP status")
        head = [STATUS_LINES[status], self._date_line]
        length: int | None = None
        chunked = close_asked = False
        for raw_name, value in headers:
            name = raw_name.lower()
            if any(c in name or c in value for c in _FORBIDDEN_IN_HEADERS) or b":" in name:
                raise AppMessageError(path, f"header {raw_name!r} is not a valid header line")
            if name == b"content-length":
                if not value.strip().isdigit():
                    raise AppMessageError(path, f"content-length {value!r} is not a length")
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                close_asked = b"close" in (token.strip() for token in value.lower().split(b","))
            head += (name, b": ", value, b"\r\n")
        if self._continue_due and self._more_body:
            self.keep_alive = False  # the client may never send the body it asked to send
        self._continue_due = False
        if close_asked:
            self.keep_alive = False
        if self.scope["method"] == "HEAD" or status in _NO_BODY_STATUSES:
            self._no_body = True
        elif chunked:
            self._chunked = True
        elif length is not None:
            self._remaining = length
        elif self._http10:
            self.keep_alive = False  # no chunked framing on HTTP/1.0: the close ends the body
        else:
            self._chunked = True
            head.append(b"transfer-encoding: chunked\r\n")
        if not self.keep_alive and not close_asked:
            head.append(b"connection: close\r\n")
        head.append(b"\r\n")
        self._held_head = b"".join(head)
        self.started = True

    def _body(self, body: bytes, *, more_body: bool) -> None:
        if self._no_body:
            data = b""
        elif self._chunked:
            data = b"%x\r\n%s\r\n" % (len(body), body) if body else b""
            if not more_body:
                data += b"0\r\n\r\n"
        else:
            data = body
            if self._remaining is not None:
                self._remaining -= len(body)
                if self._remaining < 0 or (not more_body and self._remaining > 0):
                    self._close()
                    raise AppMessageError(
                        self.scope["path"], "a body of another length than its content-length"
                    )
        held = self._held_head
        if held is not None:
            self._held_head = None
            data = held + data
        if data:
            self._transport.write(data)
        if more_body:
            return
        self.complete = True
        self._wake()
        if not self.keep_alive:
            self._transport.close()
        self._connection.response_done(self)

    def _close(self) -> None:
        self.keep_alive = False
        self._transport.close()
